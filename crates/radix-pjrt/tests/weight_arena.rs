//! `Client::weights_from_host`: weights below 8 MiB as views of shared
//! huge-page chunks. A test binary of its own, so that no other test maps
//! memory in this process while it watches a chunk being unmapped.

mod common;

use std::time::{Duration, Instant};

use radix_pjrt::ElementType;

/// Whether any mapping of this process overlaps `len` bytes at `addr`
/// (`/proc/self/maps`).
fn mapped(addr: usize, len: usize) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("Linux has maps");
    maps.lines().any(|line| {
        let range = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'));
        match range {
            Some((lo, hi)) => {
                let lo = usize::from_str_radix(lo, 16).expect("hex");
                let hi = usize::from_str_radix(hi, 16).expect("hex");
                lo < addr + len && addr < hi
            }
            None => false,
        }
    })
}

/// Ten weights of 7 MiB: the first nine share a chunk of 64 MiB, one after
/// the other; their contents are the bytes given and an execution reads
/// them; on Linux with transparent huge pages on, they lie in huge pages;
/// and once the arena has moved on to a second chunk for the tenth, the
/// first chunk is unmapped when its last buffer is dropped.
#[test]
fn weights_share_chunks_that_go_with_their_last_buffer() {
    let client = common::cpu_client(1);
    let d0 = &client.addressable_devices()[0];
    let n = (7 << 20) / 4;
    let weights: Vec<Vec<u8>> = (0..10)
        .map(|w| {
            let values: Vec<f32> = (0..n).map(|i| ((i + w * 7) % 1000) as f32).collect();
            common::f32_bytes(&values)
        })
        .collect();
    let buffers: Vec<_> = weights
        .iter()
        .map(|bytes| {
            client
                .weights_from_host(bytes, ElementType::F32, &[n as i64], d0)
                .unwrap()
        })
        .collect();
    for (b, bytes) in buffers.iter().zip(&weights) {
        assert_eq!(&b.to_host_vec().unwrap(), bytes);
    }
    let addrs: Vec<usize> = buffers
        .iter()
        .map(|b| b.device_address().unwrap())
        .collect();
    for w in 1..9 {
        assert_eq!(
            addrs[w],
            addrs[w - 1] + (7 << 20),
            "weight {w} follows weight {}",
            w - 1
        );
    }
    assert!(
        addrs[9].abs_diff(addrs[0]) >= 64 << 20,
        "the tenth weight went into the first chunk"
    );

    let exe = common::doubling(&client, n);
    let doubled = common::f32_values(&common::run(&exe, &[&buffers[4]])[0]);
    let values = common::f32_values(&buffers[4]);
    assert!(doubled.iter().zip(&values).all(|(d, v)| *d == 2.0 * v));

    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
    match thp {
        Ok(mode) if !mode.contains("[never]") => {
            let huge = common::anon_huge_kib_in(addrs[0], 9 * (7 << 20));
            assert!(
                huge >= 32 << 10,
                "the first chunk has {huge} KiB in huge pages"
            );
        }
        _ => eprintln!("transparent huge pages are off here: huge pages not checked"),
    }

    let first = (addrs[0], 9 * (7 << 20));
    let mut buffers = buffers;
    let tenth = buffers.pop().expect("ten buffers");
    drop(buffers);
    // The plugin calls the delete callback once it is done with a buffer;
    // after a finished execution that is at once, but give it a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    while mapped(first.0, first.1) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !mapped(first.0, first.1),
        "the first chunk is still mapped after its buffers were dropped"
    );
    assert!(
        mapped(addrs[9], 7 << 20),
        "the tenth weight's chunk is gone"
    );
    assert_eq!(tenth.to_host_vec().unwrap(), weights[9]);
}
