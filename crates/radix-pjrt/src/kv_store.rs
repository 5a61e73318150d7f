//! A client across processes: the node id, node count and key-value store
//! a plugin (CUDA's, for NCCL) reads at client creation, and the
//! `extern "C"` callbacks through which it reaches the store.
//!
//! The store is the caller's ([`KeyValueStore`]): radix gives one served
//! over MPI, but this crate knows nothing of where it lives. The plugin
//! calls the callbacks from its own threads, at creation and later (a new
//! set of devices to talk between); they never unwind into C (a panic is
//! an `INTERNAL` error) and hand values out in `malloc`ed memory that the
//! plugin frees through the deleter they return.

use std::ffi::{c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use crate::ffi;
use crate::{Error, Result};

/// A key-value store shared by the processes of one client: what PJRT's
/// `kv_get_callback`, `kv_try_get_callback` and `kv_put_callback` reach.
/// Keys and values are bytes. Called from the plugin's threads, at once.
pub trait KeyValueStore: Send + Sync {
    /// The value of `key`, waiting up to `timeout` for a process to put it.
    fn get(&self, key: &[u8], timeout: Duration) -> std::result::Result<Vec<u8>, StoreError>;
    /// The value of `key` if a process has put it; answers at once.
    fn try_get(&self, key: &[u8]) -> std::result::Result<Option<Vec<u8>>, StoreError>;
    /// Sets `key` to `value` for every process.
    fn put(&self, key: &[u8], value: &[u8]) -> std::result::Result<(), StoreError>;
}

/// Why a [`KeyValueStore`] call failed; the plugin gets its message and a
/// PJRT error code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// No process put the key within the wait (`DEADLINE_EXCEEDED`).
    #[error("{0}")]
    NotPut(String),
    /// The store cannot be reached: a peer died, the transport failed
    /// (`UNAVAILABLE`).
    #[error("{0}")]
    Unavailable(String),
}

/// What makes a client one of several processes: this process's node id,
/// the number of nodes, and the store they share. Passed to a plugin as
/// the create options `node_id` and `num_nodes` (int64) and the key-value
/// callbacks ([`crate::ClientOptions::distributed`]).
#[derive(Clone)]
pub struct Distributed {
    node_id: usize,
    num_nodes: usize,
    store: Arc<dyn KeyValueStore>,
}

impl std::fmt::Debug for Distributed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Distributed")
            .field("node_id", &self.node_id)
            .field("num_nodes", &self.num_nodes)
            .finish_non_exhaustive()
    }
}

impl Distributed {
    /// Node `node_id` of `num_nodes`, sharing `store`; an error unless
    /// `node_id < num_nodes`.
    pub fn new(
        node_id: usize,
        num_nodes: usize,
        store: Arc<dyn KeyValueStore>,
    ) -> Result<Distributed> {
        if node_id >= num_nodes || i64::try_from(num_nodes).is_err() {
            return Err(Error::InvalidArgument(format!(
                "node_id {node_id} of num_nodes {num_nodes}: a node id must be below the node count"
            )));
        }
        Ok(Distributed {
            node_id,
            num_nodes,
            store,
        })
    }

    /// This process's node id, from 0.
    pub fn node_id(&self) -> usize {
        self.node_id
    }

    /// The number of nodes (processes) of the client.
    pub fn num_nodes(&self) -> usize {
        self.num_nodes
    }

    /// The store the nodes share.
    pub fn store(&self) -> &Arc<dyn KeyValueStore> {
        &self.store
    }
}

/// What the callbacks' `user_arg` points to. Boxed, and kept by the client
/// until the plugin's client is destroyed: the plugin may call the
/// callbacks as long as its client lives.
pub(crate) struct Callbacks {
    store: Arc<dyn KeyValueStore>,
}

impl Callbacks {
    pub(crate) fn new(store: Arc<dyn KeyValueStore>) -> Box<Callbacks> {
        Box::new(Callbacks { store })
    }

    /// Sets the three callbacks of `args`, with `self` (boxed, so it does
    /// not move) as their user arg.
    pub(crate) fn install(&self, args: &mut ffi::PJRT_Client_Create_Args) {
        let user_arg = (self as *const Callbacks).cast_mut().cast::<c_void>();
        args.kv_get_callback = Some(kv_get);
        args.kv_get_user_arg = user_arg;
        args.kv_try_get_callback = Some(kv_try_get);
        args.kv_try_get_user_arg = user_arg;
        args.kv_put_callback = Some(kv_put);
        args.kv_put_user_arg = user_arg;
    }
}

/// A callback's failure: the PJRT error code and the message.
type Failure = (ffi::PJRT_Error_Code, String);

/// The longest wait a `kv_get` may ask for: an infinite timeout reaches the
/// callback as a negative `int` (the plugin's 64-bit milliseconds cut to
/// 32 bits), and waits this long.
const LONGEST_WAIT: Duration = Duration::from_millis(i32::MAX as u64);

/// `PJRT_KeyValueGetCallback`: waits for the key, at most `timeout_in_ms`.
unsafe extern "C" fn kv_get(args: *mut ffi::PJRT_KeyValueGetCallback_Args) -> *mut ffi::PJRT_Error {
    // SAFETY: the plugin passes valid args, or null.
    let Some(args) = (unsafe { args.as_mut() }) else {
        return ptr::null_mut();
    };
    let res = guarded("get", || {
        // SAFETY: the user arg is the `Callbacks` installed with this
        // callback, alive while the client is; the key is the plugin's.
        let (store, key) = unsafe { (store(args.user_arg)?, bytes(args.key, args.key_size)?) };
        let timeout = u64::try_from(args.timeout_in_ms)
            .map(Duration::from_millis)
            .unwrap_or(LONGEST_WAIT);
        store.get(key, timeout).map_err(failure)
    });
    match res.and_then(|v| Value::of(&v)) {
        Ok(v) => {
            (args.value, args.value_size, args.value_deleter_callback) = v.hand_out();
            ptr::null_mut()
        }
        // SAFETY: the plugin's error maker, or null.
        Err(f) => unsafe { report(args.callback_error, f) },
    }
}

/// `PJRT_KeyValueTryGetCallback`: the key's value, or a `NOT_FOUND` error.
unsafe extern "C" fn kv_try_get(
    args: *mut ffi::PJRT_KeyValueTryGetCallback_Args,
) -> *mut ffi::PJRT_Error {
    // SAFETY: the plugin passes valid args, or null.
    let Some(args) = (unsafe { args.as_mut() }) else {
        return ptr::null_mut();
    };
    let res = guarded("try_get", || {
        // SAFETY: as in `kv_get`.
        let (store, key) = unsafe { (store(args.user_arg)?, bytes(args.key, args.key_size)?) };
        match store.try_get(key).map_err(failure)? {
            Some(v) => Ok(v),
            None => Err((
                ffi::PJRT_Error_Code_NOT_FOUND,
                format!("key {:?} not found", String::from_utf8_lossy(key)),
            )),
        }
    });
    match res.and_then(|v| Value::of(&v)) {
        Ok(v) => {
            (args.value, args.value_size, args.value_deleter_callback) = v.hand_out();
            ptr::null_mut()
        }
        // SAFETY: the plugin's error maker, or null.
        Err(f) => unsafe { report(args.callback_error, f) },
    }
}

/// `PJRT_KeyValuePutCallback`: sets the key for every process.
unsafe extern "C" fn kv_put(args: *mut ffi::PJRT_KeyValuePutCallback_Args) -> *mut ffi::PJRT_Error {
    // SAFETY: the plugin passes valid args, or null.
    let Some(args) = (unsafe { args.as_mut() }) else {
        return ptr::null_mut();
    };
    let res = guarded("put", || {
        // SAFETY: as in `kv_get`; the value lives for the call.
        let (store, key, value) = unsafe {
            (
                store(args.user_arg)?,
                bytes(args.key, args.key_size)?,
                bytes(args.value, args.value_size)?,
            )
        };
        store.put(key, value).map_err(failure)
    });
    match res {
        Ok(()) => ptr::null_mut(),
        // SAFETY: the plugin's error maker, or null.
        Err(f) => unsafe { report(args.callback_error, f) },
    }
}

/// `f`'s result, with a panic turned into an `INTERNAL` failure: nothing
/// unwinds into the plugin.
fn guarded<T>(
    what: &str,
    f: impl FnOnce() -> std::result::Result<T, Failure>,
) -> std::result::Result<T, Failure> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        Err((
            ffi::PJRT_Error_Code_INTERNAL,
            format!("the key-value store's {what} panicked: {message}"),
        ))
    })
}

fn failure(e: StoreError) -> Failure {
    let code = match e {
        StoreError::NotPut(_) => ffi::PJRT_Error_Code_DEADLINE_EXCEEDED,
        StoreError::Unavailable(_) => ffi::PJRT_Error_Code_UNAVAILABLE,
    };
    (code, e.to_string())
}

/// The store behind a callback's user arg.
///
/// # Safety
/// `user_arg` is null or a `Callbacks` that outlives the returned borrow.
unsafe fn store<'a>(user_arg: *mut c_void) -> std::result::Result<&'a dyn KeyValueStore, Failure> {
    // SAFETY: forwarded from the caller.
    match unsafe { user_arg.cast::<Callbacks>().as_ref() } {
        Some(c) => Ok(&*c.store),
        None => Err((
            ffi::PJRT_Error_Code_INVALID_ARGUMENT,
            "the key-value callback got no user arg".into(),
        )),
    }
}

/// The `size` bytes at `data`; null is only allowed for no bytes.
///
/// # Safety
/// `data` is null or points to `size` readable bytes that outlive the borrow.
unsafe fn bytes<'a>(data: *const c_char, size: usize) -> std::result::Result<&'a [u8], Failure> {
    match (data.is_null(), size) {
        (true, 0) => Ok(&[]),
        (true, _) => Err((
            ffi::PJRT_Error_Code_INVALID_ARGUMENT,
            format!("the key-value callback got a null pointer for {size} bytes"),
        )),
        // SAFETY: forwarded from the caller.
        (false, _) => Ok(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) }),
    }
}

/// Makes the plugin's error for `failure`; null if the plugin gave no
/// error maker (then nothing can be reported, and the value stays null).
///
/// # Safety
/// `maker` is null or points to the plugin's `PJRT_CallbackError`.
unsafe fn report(
    maker: *mut ffi::PJRT_CallbackError,
    (code, message): Failure,
) -> *mut ffi::PJRT_Error {
    // SAFETY: forwarded from the caller.
    match unsafe { maker.as_ref() }.copied().flatten() {
        // SAFETY: the plugin's function, which copies the message.
        Some(make) => unsafe { make(code, message.as_ptr().cast(), message.len()) },
        None => ptr::null_mut(),
    }
}

/// A value in memory of `malloc`, which the plugin frees through
/// [`free_value`] (`value_deleter_callback`).
struct Value {
    data: *mut c_char,
    len: usize,
}

/// How many values handed out are not yet freed (for the tests).
#[cfg(test)]
static LIVE_VALUES: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

impl Value {
    fn of(v: &[u8]) -> std::result::Result<Value, Failure> {
        // SAFETY: plain allocation; at least one byte, so never null for
        // an empty value.
        let data = unsafe { libc::malloc(v.len().max(1)) }.cast::<c_char>();
        if data.is_null() {
            return Err((
                ffi::PJRT_Error_Code_RESOURCE_EXHAUSTED,
                format!(
                    "cannot allocate {} bytes for a key-value store value",
                    v.len()
                ),
            ));
        }
        // SAFETY: `data` holds at least `v.len()` bytes.
        unsafe { ptr::copy_nonoverlapping(v.as_ptr(), data.cast::<u8>(), v.len()) };
        #[cfg(test)]
        LIVE_VALUES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Value { data, len: v.len() })
    }

    /// The value, its length and its deleter, for the plugin to own.
    fn hand_out(self) -> (*mut c_char, usize, ffi::PJRT_KeyValue_ValueDeleter) {
        (self.data, self.len, Some(free_value))
    }
}

/// `value_deleter_callback`: frees a value [`Value::of`] allocated.
unsafe extern "C" fn free_value(value: *mut c_char) {
    if value.is_null() {
        return;
    }
    #[cfg(test)]
    LIVE_VALUES.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    // SAFETY: `value` came from `malloc` in `Value::of`, freed once.
    unsafe { libc::free(value.cast()) };
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::ffi::c_int;
    use std::sync::Mutex;
    use std::sync::atomic::Ordering;

    use super::*;

    /// A store in this process's memory, as one process of a client sees
    /// the shared one.
    #[derive(Default)]
    struct Memory(Mutex<HashMap<Vec<u8>, Vec<u8>>>);

    impl KeyValueStore for Memory {
        fn get(&self, key: &[u8], timeout: Duration) -> std::result::Result<Vec<u8>, StoreError> {
            self.0.lock().unwrap().get(key).cloned().ok_or_else(|| {
                StoreError::NotPut(format!(
                    "no {:?} within {timeout:?}",
                    String::from_utf8_lossy(key)
                ))
            })
        }

        fn try_get(&self, key: &[u8]) -> std::result::Result<Option<Vec<u8>>, StoreError> {
            if key == b"panic" {
                panic!("asked for the key that panics");
            }
            Ok(self.0.lock().unwrap().get(key).cloned())
        }

        fn put(&self, key: &[u8], value: &[u8]) -> std::result::Result<(), StoreError> {
            if key == b"unreachable" {
                return Err(StoreError::Unavailable("rank 0 is gone".into()));
            }
            self.0.lock().unwrap().insert(key.to_vec(), value.to_vec());
            Ok(())
        }
    }

    /// What the test's error maker was last given, and a fake `PJRT_Error`
    /// pointer it returns: the plugin's errors are opaque to callers.
    static LAST_ERROR: Mutex<Option<(ffi::PJRT_Error_Code, String)>> = Mutex::new(None);

    unsafe extern "C" fn make_error(
        code: ffi::PJRT_Error_Code,
        message: *const c_char,
        size: usize,
    ) -> *mut ffi::PJRT_Error {
        // SAFETY: the callback's message, `size` bytes, alive for the call.
        let text = unsafe { std::slice::from_raw_parts(message.cast::<u8>(), size) };
        *LAST_ERROR.lock().unwrap() = Some((code, String::from_utf8_lossy(text).into_owned()));
        ptr::NonNull::dangling().as_ptr()
    }

    /// The error the last failing callback made, taken.
    fn last_error() -> (ffi::PJRT_Error_Code, String) {
        LAST_ERROR
            .lock()
            .unwrap()
            .take()
            .expect("an error was made")
    }

    /// Client-create args with the callbacks installed, as the plugin gets them.
    fn installed(callbacks: &Callbacks) -> ffi::PJRT_Client_Create_Args {
        let mut args = ffi::PJRT_Client_Create_Args::new();
        callbacks.install(&mut args);
        args
    }

    /// Calls the get callback of `create` as the plugin does; the value
    /// copied and freed through its deleter.
    fn get(
        create: &ffi::PJRT_Client_Create_Args,
        maker: &mut ffi::PJRT_CallbackError,
        key: &[u8],
        timeout_in_ms: c_int,
    ) -> Option<Vec<u8>> {
        let mut args = ffi::PJRT_KeyValueGetCallback_Args::new();
        args.key = key.as_ptr().cast();
        args.key_size = key.len();
        args.timeout_in_ms = timeout_in_ms;
        args.callback_error = maker;
        args.user_arg = create.kv_get_user_arg;
        // SAFETY: args as the plugin builds them.
        let err = unsafe { create.kv_get_callback.unwrap()(&mut args) };
        // SAFETY: the value the callback handed out.
        (err.is_null()).then(|| unsafe {
            take_value(args.value, args.value_size, args.value_deleter_callback)
        })
    }

    fn try_get(
        create: &ffi::PJRT_Client_Create_Args,
        maker: &mut ffi::PJRT_CallbackError,
        key: &[u8],
    ) -> Option<Vec<u8>> {
        let mut args = ffi::PJRT_KeyValueTryGetCallback_Args::new();
        args.key = key.as_ptr().cast();
        args.key_size = key.len();
        args.callback_error = maker;
        args.user_arg = create.kv_try_get_user_arg;
        // SAFETY: args as the plugin builds them.
        let err = unsafe { create.kv_try_get_callback.unwrap()(&mut args) };
        // SAFETY: the value the callback handed out.
        (err.is_null()).then(|| unsafe {
            take_value(args.value, args.value_size, args.value_deleter_callback)
        })
    }

    fn put(
        create: &ffi::PJRT_Client_Create_Args,
        maker: &mut ffi::PJRT_CallbackError,
        key: &[u8],
        value: &[u8],
    ) -> bool {
        let mut args = ffi::PJRT_KeyValuePutCallback_Args::new();
        args.key = key.as_ptr().cast();
        args.key_size = key.len();
        args.value = value.as_ptr().cast();
        args.value_size = value.len();
        args.callback_error = maker;
        args.user_arg = create.kv_put_user_arg;
        // SAFETY: args as the plugin builds them.
        unsafe { create.kv_put_callback.unwrap()(&mut args) }.is_null()
    }

    /// Copies a handed-out value and frees it through its deleter.
    ///
    /// # Safety
    /// As a callback returned them.
    unsafe fn take_value(
        value: *mut c_char,
        size: usize,
        deleter: ffi::PJRT_KeyValue_ValueDeleter,
    ) -> Vec<u8> {
        assert!(!value.is_null());
        // SAFETY: forwarded.
        let copy = unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) }.to_vec();
        // SAFETY: the deleter of this value, called once.
        unsafe { deleter.expect("a deleter")(value) };
        copy
    }

    #[test]
    fn the_callbacks_reach_the_store_as_the_plugin_calls_them() {
        let callbacks = Callbacks::new(Arc::new(Memory::default()));
        let create = installed(&callbacks);
        let mut maker: ffi::PJRT_CallbackError = Some(make_error);
        let maker = &mut maker;

        assert!(put(&create, maker, b"nccl/0", &[0, 1, 255]));
        assert!(put(&create, maker, b"empty", &[]));
        assert_eq!(get(&create, maker, b"nccl/0", 10), Some(vec![0, 1, 255]));
        assert_eq!(try_get(&create, maker, b"nccl/0"), Some(vec![0, 1, 255]));
        assert_eq!(try_get(&create, maker, b"empty"), Some(vec![]));
        // An infinite timeout, as the plugin writes it, is a long wait.
        assert_eq!(get(&create, maker, b"empty", -1), Some(vec![]));
        // A put replaces the value.
        assert!(put(&create, maker, b"nccl/0", b"again"));
        assert_eq!(try_get(&create, maker, b"nccl/0"), Some(b"again".to_vec()));
        // Every value handed out was freed through the deleter.
        assert_eq!(LIVE_VALUES.load(Ordering::SeqCst), 0);

        assert_eq!(try_get(&create, maker, b"missing"), None);
        assert_eq!(
            last_error(),
            (
                ffi::PJRT_Error_Code_NOT_FOUND,
                "key \"missing\" not found".into()
            )
        );
        assert_eq!(get(&create, maker, b"missing", 5), None);
        let (code, message) = last_error();
        assert_eq!(code, ffi::PJRT_Error_Code_DEADLINE_EXCEEDED);
        assert!(
            message.contains("missing") && message.contains("5ms"),
            "{message}"
        );
        assert!(!put(&create, maker, b"unreachable", b"x"));
        assert_eq!(
            last_error(),
            (ffi::PJRT_Error_Code_UNAVAILABLE, "rank 0 is gone".into())
        );
        // A panic in the store is an error, not an unwind into C.
        assert_eq!(try_get(&create, maker, b"panic"), None);
        let (code, message) = last_error();
        assert_eq!(code, ffi::PJRT_Error_Code_INTERNAL);
        assert!(
            message.contains("asked for the key that panics"),
            "{message}"
        );
        // A null key of some length is refused, not read.
        let mut args = ffi::PJRT_KeyValuePutCallback_Args::new();
        args.key_size = 3;
        args.callback_error = maker;
        args.user_arg = create.kv_put_user_arg;
        // SAFETY: args as a faulty plugin would build them.
        assert!(!unsafe { kv_put(&mut args) }.is_null());
        assert_eq!(last_error().0, ffi::PJRT_Error_Code_INVALID_ARGUMENT);
        assert_eq!(LIVE_VALUES.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_node_id_must_be_below_the_node_count() {
        let store: Arc<dyn KeyValueStore> = Arc::new(Memory::default());
        let d = Distributed::new(1, 2, store.clone()).unwrap();
        assert_eq!((d.node_id(), d.num_nodes()), (1, 2));
        let err = Distributed::new(2, 2, store).unwrap_err();
        assert!(
            err.to_string().contains("node_id 2 of num_nodes 2"),
            "{err}"
        );
    }
}
