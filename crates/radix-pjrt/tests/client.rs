//! Clients, devices and buffers.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::f32_buffer;
use radix_pjrt::provision::Target;
use radix_pjrt::{
    Client, ClientOptions, Distributed, ElementType, KeyValueStore, NamedValue, OpenOptions,
    StoreError, Value, byte_len, open,
};

#[test]
fn cpu_client_reports_platform_and_devices() {
    let client = common::cpu_client(3);
    assert_eq!(client.platform_name(), "cpu");
    assert!(!client.platform_version().is_empty());
    assert_eq!(client.process_index(), 0);
    let devices = client.addressable_devices();
    assert_eq!(devices.len(), 3);
    assert_eq!(client.devices().len(), 3);
    for (i, d) in devices.iter().enumerate() {
        assert_eq!(d.id(), i as i32);
        assert_eq!(d.process_index(), 0);
        assert!(d.is_addressable());
        assert_eq!(d.local_hardware_id(), i as i32);
        assert!(d.kind().to_lowercase().contains("cpu"), "{}", d.kind());
    }
}

#[test]
fn default_options_and_extra_int64_count() {
    let plugin = common::cpu_plugin();
    let client = Client::new(plugin.clone(), &ClientOptions::default()).unwrap();
    assert!(!client.addressable_devices().is_empty());
    let options = ClientOptions {
        extra: vec![NamedValue::new("cpu_device_count", Value::Int64(2))],
        ..ClientOptions::default()
    };
    assert_eq!(
        Client::new(plugin, &options)
            .unwrap()
            .addressable_devices()
            .len(),
        2
    );
}

#[test]
fn buffer_round_trip_and_metadata() {
    let client = common::cpu_client(2);
    let d1 = &client.addressable_devices()[1];
    for ty in ElementType::ALL {
        let dims = [2, 3];
        let n = byte_len(ty, &dims).unwrap();
        assert_eq!(n, 6 * ty.byte_size());
        // PRED must hold 0 or 1.
        let bytes: Vec<u8> = (0..n)
            .map(|i| {
                if ty == ElementType::Bool {
                    (i % 2) as u8
                } else {
                    i as u8
                }
            })
            .collect();
        let b = client.buffer_from_host(&bytes, ty, &dims, d1).unwrap();
        assert_eq!(b.element_type().unwrap(), ty);
        assert_eq!(b.dims().unwrap(), &dims);
        assert_eq!(b.device().unwrap(), d1);
        assert_eq!(b.host_size().unwrap(), n);
        assert!(b.on_device_size().unwrap() >= n);
        assert!(!b.is_deleted().unwrap());
        b.ready_event().unwrap().wait().unwrap();
        assert_eq!(b.to_host_vec().unwrap(), bytes, "{ty:?}");
    }
}

/// A large upload (8 MiB or more) takes the huge-page path: an
/// uninitialized buffer filled through its address. Its contents must be the
/// bytes given, an execution must read them, and on Linux with transparent
/// huge pages on, its memory must be in huge pages.
#[test]
fn large_upload_round_trips_in_huge_pages() {
    let client = common::cpu_client(1);
    let d0 = &client.addressable_devices()[0];
    // 24 MiB of f32: the middle 20 MiB or more are whole 2 MiB pages.
    let n = 6 << 20;
    let values: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 - 500.0).collect();
    let bytes = common::f32_bytes(&values);
    let b = client
        .buffer_from_host(&bytes, ElementType::F32, &[n as i64], d0)
        .unwrap();
    assert_eq!(b.to_host_vec().unwrap(), bytes);
    let exe = common::doubling(&client, n);
    let doubled = common::f32_values(&common::run(&exe, &[&b])[0]);
    assert!(doubled.iter().zip(&values).all(|(d, v)| *d == 2.0 * v));

    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
    match thp {
        Ok(mode) if !mode.contains("[never]") => {
            let huge = common::anon_huge_kib_in(b.device_address().unwrap(), bytes.len());
            assert!(
                huge >= 2048,
                "the buffer's mapping has {huge} KiB in huge pages"
            );
        }
        _ => eprintln!("transparent huge pages are off here: contents checked only"),
    }
}

/// A weight's upload reports the bytes it has copied: ranges that
/// together are all of them, by the time it returns, and for a large one
/// (copied in chunks where it takes huge pages) several ranges, so that a
/// caller can let go of pages during the copy. The contents round-trip.
#[test]
fn a_weight_upload_reports_what_it_copied() {
    let client = common::cpu_client(1);
    let d0 = &client.addressable_devices()[0];
    for n in [1000, 6 << 20] {
        let values: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 - 500.0).collect();
        let bytes = common::f32_bytes(&values);
        let seen = std::cell::RefCell::new(vec![]);
        let b = client
            .weights_from_host_releasing(&bytes, ElementType::F32, &[n as i64], d0, &|r| {
                seen.borrow_mut().push(r)
            })
            .unwrap();
        assert_eq!(b.to_host_vec().unwrap(), bytes);
        let seen = seen.into_inner();
        let mut covered = vec![false; bytes.len()];
        for r in &seen {
            covered[r.clone()].fill(true);
        }
        assert!(covered.iter().all(|&c| c), "{n} values: {seen:?}");
        if cfg!(target_os = "linux") && n > 1000 {
            assert!(seen.len() > 2, "a large copy in chunks: {seen:?}");
        }
    }
}

/// `zeros` gives zeros, small and large, also where the allocator hands
/// back the memory of a buffer that held other bytes, and uploads nothing
/// on the CPU plugin.
#[test]
fn zeros_are_zeros() {
    let client = common::cpu_client(1);
    let d0 = &client.addressable_devices()[0];
    for n in [0, 7, 1000, 3 << 20] {
        let ones = common::f32_bytes(&vec![1.0; n]);
        drop(
            client
                .buffer_from_host(&ones, ElementType::F32, &[n as i64], d0)
                .unwrap(),
        );
        let before = client.host_to_device_bytes();
        let z = client.zeros(ElementType::F32, &[n as i64], d0).unwrap();
        assert_eq!(
            client.host_to_device_bytes(),
            before,
            "{n} zeros uploaded nothing"
        );
        assert!(
            z.to_host_vec().unwrap().iter().all(|&b| b == 0),
            "{n} zeros"
        );
    }
    let z = client.zeros(ElementType::F16, &[3, 5], d0).unwrap();
    assert_eq!(z.to_host_vec().unwrap(), vec![0u8; 30]);
}

#[test]
fn scalars_and_empty_arrays() {
    let client = common::cpu_client(1);
    let s = f32_buffer(&client, &[7.5], &[]);
    assert_eq!(s.dims().unwrap(), &[] as &[i64]);
    assert_eq!(common::f32_values(&s), [7.5]);
    let e = f32_buffer(&client, &[], &[0, 3]);
    assert_eq!(e.dims().unwrap(), &[0, 3]);
    assert!(e.to_host_vec().unwrap().is_empty());
}

#[test]
fn element_type_codes_round_trip() {
    for ty in ElementType::ALL {
        assert_eq!(ElementType::from_pjrt(ty.to_pjrt()), Some(ty));
    }
    assert_eq!(ElementType::from_pjrt(0), None);
    assert_eq!(ElementType::from_pjrt(11), Some(ElementType::F32));
    assert_eq!(ElementType::from_pjrt(13), Some(ElementType::BF16));
}

#[test]
fn thread_safety_follows_pjrt() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<radix_pjrt::Plugin>();
    send_sync::<Client>();
    send_sync::<radix_pjrt::Device>();
    send_sync::<radix_pjrt::Buffer>();
    send_sync::<radix_pjrt::LoadedExecutable>();
    send::<radix_pjrt::Event>();
    send::<radix_pjrt::Execution>();
}

/// A store no client may reach: the CPU plugin has no use for one.
struct Untouched;

impl KeyValueStore for Untouched {
    fn get(&self, key: &[u8], _: Duration) -> Result<Vec<u8>, StoreError> {
        panic!("get {key:?} of a store the CPU client must not reach")
    }

    fn try_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        panic!("try_get {key:?} of a store the CPU client must not reach")
    }

    fn put(&self, key: &[u8], _: &[u8]) -> Result<(), StoreError> {
        panic!("put {key:?} of a store the CPU client must not reach")
    }
}

#[test]
fn a_cpu_client_gets_no_node_id_nor_store() {
    let d = Distributed::new(1, 2, Arc::new(Untouched)).unwrap();
    // The options reach the plugin: the CPU plugin refuses them by name.
    let options = ClientOptions {
        distributed: Some(d.clone()),
        ..ClientOptions::default()
    };
    let err = Client::new(common::cpu_plugin(), &options)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("INVALID_ARGUMENT") && (err.contains("node_id") || err.contains("num_nodes")),
        "{err}"
    );
    // A node id given twice is refused before the plugin sees it.
    let options = ClientOptions {
        extra: vec![NamedValue::new("num_nodes", Value::Int64(2))],
        distributed: Some(d.clone()),
        ..ClientOptions::default()
    };
    let err = Client::new(common::cpu_plugin(), &options).unwrap_err();
    assert!(
        err.to_string().contains("num_nodes is given twice"),
        "{err}"
    );
    // `open` gives them to CUDA's plugin only.
    let client = open(&OpenOptions {
        distributed: Some(&d),
        ..OpenOptions::target(Target::Cpu)
    })
    .unwrap();
    assert_eq!((client.platform_name(), client.process_index()), ("cpu", 0));
}
