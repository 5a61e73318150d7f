//! Shared test helpers: the CPU plugin, loaded once per test binary, and
//! byte conversions.

#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use radix_pjrt::provision::{Target, locate};
use radix_pjrt::{
    Buffer, Client, ClientOptions, CompileOptions, ElementType, ExecuteOptions, LoadedExecutable,
    Plugin,
};

/// The CPU plugin, loaded once per process.
pub fn cpu_plugin() -> Arc<Plugin> {
    static PLUGIN: OnceLock<Arc<Plugin>> = OnceLock::new();
    PLUGIN
        .get_or_init(|| {
            let path = locate(Target::Cpu, None).expect("a CPU PJRT plugin");
            Plugin::load(&path).expect("the CPU plugin loads")
        })
        .clone()
}

/// A CPU client with `devices` devices.
pub fn cpu_client(devices: i64) -> Client {
    let options = ClientOptions {
        cpu_device_count: Some(devices),
        ..ClientOptions::default()
    };
    Client::new(cpu_plugin(), &options).expect("a CPU client")
}

/// Compiles `mlir` for one device.
pub fn compile(client: &Client, mlir: &str) -> LoadedExecutable {
    client
        .compile(mlir, &CompileOptions::default())
        .unwrap_or_else(|e| panic!("compile failed: {e}\n{mlir}"))
}

/// An f32 buffer on the client's first device.
pub fn f32_buffer(client: &Client, values: &[f32], dims: &[i64]) -> Buffer {
    let device = &client.addressable_devices()[0];
    client
        .buffer_from_host(&f32_bytes(values), ElementType::F32, dims, device)
        .unwrap()
}

/// Runs `exe` on one device and returns its outputs.
pub fn run(exe: &LoadedExecutable, args: &[&Buffer]) -> Vec<Buffer> {
    let mut out = exe.execute(&[args], &ExecuteOptions::default()).unwrap();
    out.pop().unwrap()
}

pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub fn f32_values(buffer: &Buffer) -> Vec<f32> {
    let bytes = buffer.to_host_vec().unwrap();
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

pub fn i32_values(buffer: &Buffer) -> Vec<i32> {
    let bytes = buffer.to_host_vec().unwrap();
    bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// `AnonHugePages` of the mappings overlapping `len` bytes at `addr`, from
/// `/proc/self/smaps` (advice splits a mapping at the huge pages' bounds).
pub fn anon_huge_kib_in(addr: usize, len: usize) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("Linux has smaps");
    let (mut inside, mut kib) = (false, 0);
    for line in smaps.lines() {
        let range = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'));
        if let Some((lo, hi)) = range
            && let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        {
            inside = lo < addr + len && addr < hi;
        } else if inside && let Some(v) = line.strip_prefix("AnonHugePages:") {
            kib += v
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .expect("kB");
        }
    }
    kib
}

/// A program doubling an `f32[n]`: `x + x`.
pub fn doubling(client: &Client, n: usize) -> LoadedExecutable {
    compile(
        client,
        &format!(
            "func.func @main(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{
               %y = stablehlo.add %x, %x : tensor<{n}xf32>
               return %y : tensor<{n}xf32>
             }}"
        ),
    )
}
