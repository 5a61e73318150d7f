//! Loading plugins: attributes, versions, and bad files.

mod common;

use std::io::Write;

use radix_pjrt::{Error, Plugin, Value};

#[test]
fn attributes_and_versions() {
    let plugin = common::cpu_plugin();
    let (major, minor) = plugin.api_version();
    assert_eq!(major, 0);
    assert!(minor >= 81, "minor {minor}");
    let current = plugin
        .stablehlo_current_version()
        .expect("stablehlo_current_version");
    let minimum = plugin
        .stablehlo_minimum_version()
        .expect("stablehlo_minimum_version");
    assert_eq!(current.len(), 3);
    assert!(current >= minimum, "{current:?} < {minimum:?}");
    assert!(matches!(
        plugin.attribute("xla_version"),
        Some(Value::Int64(_)) | None
    ));
    eprintln!("{plugin:?}: {:?}", plugin.attributes());
}

#[test]
fn loading_twice_gives_the_same_plugin() {
    let a = common::cpu_plugin();
    let b = Plugin::load(a.path()).unwrap();
    assert!(std::sync::Arc::ptr_eq(&a, &b));
}

#[test]
fn sha256_is_hex_and_cached() {
    let plugin = common::cpu_plugin();
    let a = plugin.sha256().unwrap();
    assert_eq!(a.len(), 64);
    assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    assert!(std::ptr::eq(a, plugin.sha256().unwrap()));
}

fn check_load_error(bytes: &[u8]) -> String {
    let mut file = tempfile::Builder::new().suffix(".so").tempfile().unwrap();
    file.write_all(bytes).unwrap();
    file.flush().unwrap();
    match Plugin::load(file.path()) {
        Err(Error::PluginLoad { path, reason }) => {
            assert_eq!(path, file.path());
            reason
        }
        other => panic!("expected PluginLoad, got {other:?}"),
    }
}

#[test]
fn missing_file_is_an_error() {
    let path = std::path::Path::new("/nonexistent/radix/plugin.so");
    match Plugin::load(path) {
        Err(Error::PluginLoad { path: p, .. }) => assert_eq!(p, path),
        other => panic!("expected PluginLoad, got {other:?}"),
    }
}

#[test]
fn garbage_file_is_an_error() {
    check_load_error(b"this is not a shared library");
    check_load_error(b"");
    check_load_error(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
}

#[test]
fn truncated_plugin_is_an_error() {
    let real = std::fs::read(common::cpu_plugin().path()).unwrap();
    for n in [4096, 64 * 1024, real.len() / 2] {
        let reason = check_load_error(&real[..n]);
        assert!(
            reason.contains("truncated") || reason.contains("ELF"),
            "{reason}"
        );
    }
}

#[test]
fn corrupt_plugin_is_an_error() {
    // A real ELF header followed by garbage.
    let real = std::fs::read(common::cpu_plugin().path()).unwrap();
    let mut bytes = real[..64].to_vec();
    bytes.extend(std::iter::repeat_n(0xabu8, 8192));
    check_load_error(&bytes);
}

#[test]
fn library_without_get_pjrt_api_is_an_error() {
    // A shared library this process already has mapped (the C library or
    // another system library): complete and harmless, and no plugin.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let library = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(std::path::PathBuf::from)
        .find(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("lib") && name.contains(".so") && !name.contains("pjrt")
        })
        .expect("a shared library mapped into this process");
    match Plugin::load(&library) {
        Err(Error::PluginLoad { path, reason }) => {
            assert_eq!(path, library);
            assert!(reason.contains("GetPjrtApi"), "{reason}");
        }
        other => panic!(
            "expected PluginLoad for {}, got {other:?}",
            library.display()
        ),
    }
}

/// Paging out the plugin's code after a compile changes nothing but where
/// the pages live: the mapping's resident pages go, and the client
/// compiles and runs as before.
#[test]
fn paging_out_the_code_leaves_the_client_working() {
    let client = common::cpu_client(1);
    let exe = common::doubling(&client, 4);
    let resident = || plugin_resident_kib(client.plugin().path());
    let before = resident();
    let advised = client.plugin().page_out_code().unwrap();
    assert!(advised > 1 << 20, "{advised} bytes advised");
    let after = resident();
    assert!(
        after < before,
        "{before} KiB resident before, {after} after"
    );
    let x = common::f32_buffer(&client, &[1.0, 2.0, 3.0, 4.0], &[4]);
    assert_eq!(
        common::f32_values(&common::run(&exe, &[&x])[0]),
        [2.0, 4.0, 6.0, 8.0]
    );
    let again = common::doubling(&client, 8);
    let y = common::f32_buffer(&client, &[0.5; 8], &[8]);
    assert_eq!(common::f32_values(&common::run(&again, &[&y])[0]), [1.0; 8]);
}

/// The resident KiB of this process's mappings of `path`.
fn plugin_resident_kib(path: &std::path::Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut ours = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [range, _, _, _, _, rest @ ..] if range.contains('-') && !range.ends_with(':') => {
                ours = rest.first().map(std::path::Path::new) == Some(path);
            }
            ["Rss:", n, "kB"] if ours => kib += n.parse::<u64>().unwrap(),
            _ => {}
        }
    }
    kib
}
