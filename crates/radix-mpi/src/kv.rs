//! A key-value store for the processes of one job: what a PJRT plugin
//! uses to build a client across processes (the CUDA plugin's NCCL ids).
//!
//! Rank 0 holds the map. The other ranks ask it over MPI: a request is a
//! header (the operation and two lengths) and, when not empty, the key and
//! value; the answer is a header (found or not, and a length) and the
//! value. Rank 0 answers from a thread of its own ([`serve`]), so a rank's
//! request needs nothing from rank 0's other threads. Requests and answers
//! use the largest tag, which no collective uses (`World::store_channel`).
//!
//! Every request is answered at once: [`KvStore::get`] asks again, a little
//! later each time, until the key is there or its timeout ends, so a long
//! wait never holds a peer. Each round trip has the world's deadline; one
//! that fails (rank 0 died, say) breaks the world ([`Error::Broken`]) as a
//! failed collective does. A process started alone holds the map itself and
//! never loads MPI.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::abi;
use crate::error::{Error, Result};
use crate::world::{Connected, World, world};

/// The key-value store of the job this process belongs to; see [`kv_store`].
pub struct KvStore {
    world: &'static World,
    /// The map itself, on rank 0 (and in a process started alone).
    map: Option<Arc<Map>>,
    /// Held around each round trip to rank 0: one request of this process
    /// is in flight at a time, so an answer is always the current one's.
    round_trip: Mutex<()>,
}

impl std::fmt::Debug for KvStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvStore")
            .field("rank", &self.world.rank())
            .field("holds_map", &self.map.is_some())
            .finish()
    }
}

/// The store of this process's job, opened once: on rank 0 of a job of
/// more than one process this starts the thread that answers the others,
/// so every rank of such a job must open it (their requests wait for rank
/// 0's within the deadline), and rank 0 must outlive the others' use of
/// it (once rank 0 ends, their requests fail within the deadline). A
/// process started alone gets a map of its own. The first call's error is
/// every call's.
pub fn kv_store() -> Result<&'static KvStore> {
    static STORE: OnceLock<Result<KvStore>> = OnceLock::new();
    STORE
        .get_or_init(|| KvStore::open(world()?))
        .as_ref()
        .map_err(Clone::clone)
}

impl KvStore {
    fn open(world: &'static World) -> Result<KvStore> {
        let map = (world.rank() == 0).then(|| Arc::new(Map::default()));
        if let Some(map) = &map
            && world.uses_mpi()
            && world.size() > 1
        {
            let map = map.clone();
            std::thread::Builder::new()
                .name("radix-kv-store".into())
                .spawn(move || {
                    let res = serve(world, &map);
                    let _ = world.record(res);
                })
                .map_err(|e| Error::Invalid {
                    what: "key-value store".into(),
                    reason: format!("cannot start the thread that answers the ranks: {e}"),
                })?;
        }
        Ok(KvStore {
            world,
            map,
            round_trip: Mutex::new(()),
        })
    }

    /// Sets `key` to `value` for every rank (a later put of the same key
    /// replaces it).
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        if let Some(map) = &self.map {
            map.put(key, value);
            return Ok(());
        }
        match self.ask(Op::Put, key, value)? {
            Answer::Stored => Ok(()),
            other => Err(self.unexpected("put", key, other)),
        }
    }

    /// The value of `key`, if some rank has put it; answers at once.
    pub fn try_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(map) = &self.map {
            return Ok(map.get(key));
        }
        match self.ask(Op::TryGet, key, &[])? {
            Answer::Found(v) => Ok(Some(v)),
            Answer::Missing => Ok(None),
            other => Err(self.unexpected("try_get", key, other)),
        }
    }

    /// The value of `key`, waiting up to `timeout` for some rank to put it;
    /// then an [`Error::KeyNotPut`] naming the key. A round trip to rank 0
    /// already under way ends first (it has the world's deadline, and
    /// rank 0 answers at once while it lives).
    pub fn get(&self, key: &[u8], timeout: Duration) -> Result<Vec<u8>> {
        let start = Instant::now();
        let not_put = || Error::KeyNotPut {
            key: String::from_utf8_lossy(key).into_owned(),
            rank: self.world.rank(),
            seconds: timeout.as_secs_f64(),
        };
        let Some(deadline) = start.checked_add(timeout) else {
            return Err(Error::Invalid {
                what: format!("key-value store get of key {:?}", lossy(key)),
                reason: format!("a timeout of {timeout:?} ends past what a clock can say"),
            });
        };
        if let Some(map) = &self.map {
            return map.wait(key, deadline).ok_or_else(not_put);
        }
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(v) = self.try_get(key)? {
                return Ok(v);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(not_put());
            }
            std::thread::sleep(pause.min(left));
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// One request to rank 0 and its answer, within the world's deadline.
    fn ask(&self, op: Op, key: &[u8], value: &[u8]) -> Result<Answer> {
        let what = format!("key-value store {} of key {:?}", op.name(), lossy(key));
        let _one = self.round_trip.lock().unwrap_or_else(|e| e.into_inner());
        let Some((c, tag)) = self.world.store_channel()? else {
            return Err(Error::Invalid {
                what,
                reason: "a process started alone has no rank 0 to ask".into(),
            });
        };
        let header = encode(&[op as u64, key.len() as u64, value.len() as u64]);
        let body = [key, value].concat();
        let mut sends: Vec<(usize, &[u8])> = vec![(0, &header)];
        if !body.is_empty() {
            sends.push((0, &body));
        }
        let mut answer = vec![0u8; ANSWER_LEN];
        let res =
            self.world
                .post_and_wait_on(c, &what, tag, &sends, &mut [(0, &mut answer[..])], || {});
        if let Err(e) = self.world.record(res) {
            // MPI may still read or write these.
            std::mem::forget((header, body, answer));
            return Err(e);
        }
        let [kind, len] = decode::<2>(&answer);
        let len = checked_len(&what, len)?;
        let mut data = vec![0u8; len];
        if len > 0 {
            let res =
                self.world
                    .post_and_wait_on(c, &what, tag, &[], &mut [(0, &mut data[..])], || {});
            if let Err(e) = self.world.record(res) {
                std::mem::forget(data);
                return Err(e);
            }
        }
        match kind {
            STORED => Ok(Answer::Stored),
            FOUND => Ok(Answer::Found(data)),
            MISSING => Ok(Answer::Missing),
            other => Err(Error::Invalid {
                what,
                reason: format!("rank 0 answered with the unknown kind {other}"),
            }),
        }
    }

    fn unexpected(&self, op: &str, key: &[u8], answer: Answer) -> Error {
        Error::Invalid {
            what: format!("key-value store {op} of key {:?}", lossy(key)),
            reason: format!("rank 0 answered {answer:?}"),
        }
    }
}

/// The map, and a condition variable for the waits on rank 0.
#[derive(Default)]
struct Map {
    entries: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
    put: Condvar,
}

impl Map {
    fn put(&self, key: &[u8], value: &[u8]) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.insert(key.to_vec(), value.to_vec());
        self.put.notify_all();
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get(key).cloned()
    }

    /// The value of `key` once some rank put it, or `None` at `deadline`.
    fn wait(&self, key: &[u8], deadline: Instant) -> Option<Vec<u8>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(v) = entries.get(key) {
                return Some(v.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            entries = self
                .put
                .wait_timeout(entries, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// What a rank asks of rank 0 (the first word of a request).
#[derive(Debug, Clone, Copy)]
enum Op {
    Put = 1,
    TryGet = 2,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::TryGet => "get",
        }
    }
}

/// Rank 0's answer (the first word of an answer: [`STORED`], [`FOUND`],
/// [`MISSING`]).
#[derive(Debug)]
enum Answer {
    Stored,
    Found(Vec<u8>),
    Missing,
}

const STORED: u64 = 1;
const FOUND: u64 = 2;
const MISSING: u64 = 3;

/// A request's header: the operation, the key's length, the value's.
const REQUEST_LEN: usize = 24;
/// An answer's header: its kind and the value's length.
const ANSWER_LEN: usize = 16;
/// The most bytes one key and value may hold together: a header asking for
/// more is corrupt.
const MAX_LEN: u64 = 1 << 32;

/// Set when the process finalizes MPI: the service makes no MPI call again.
static STOPPED: AtomicBool = AtomicBool::new(false);
/// The service's posted receive of the next request, if any, so that
/// [`stop_service`] can cancel it.
static PENDING: Mutex<abi::Request> = Mutex::new(abi::REQUEST_NULL);

/// Stops rank 0's service before MPI is finalized: its posted receive is
/// cancelled and it calls MPI no more. Called with the world's MPI lock
/// held.
pub(crate) fn stop_service(mpi: &crate::Mpi) {
    STOPPED.store(true, Ordering::SeqCst);
    let mut r = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    if *r != abi::REQUEST_NULL {
        // SAFETY: the service's live receive; cancelling a receive completes
        // it locally, and the test frees it.
        unsafe {
            (mpi.cancel)(&mut *r);
            let mut done: c_int = 0;
            (mpi.test)(&mut *r, &mut done, &mut abi::Status::default());
        }
        *r = abi::REQUEST_NULL;
    }
}

/// Rank 0's service: answers requests one at a time until the process
/// finalizes MPI or the world fails; an error here is the world's failure.
fn serve(world: &World, map: &Map) -> Result<()> {
    let Some((c, tag)) = world.store_channel()? else {
        return Ok(());
    };
    // The receive buffer of every header, alive as long as the process:
    // the receive may be pending when the process ends.
    let header: &'static mut [u8; REQUEST_LEN] = Box::leak(Box::new([0; REQUEST_LEN]));
    let header = &mut *header;
    loop {
        let Some(source) = next_request(world, c, tag, header)? else {
            return Ok(());
        };
        let [op, key_len, value_len] = decode::<3>(header);
        let what = format!("key-value store: a request of rank {source}");
        let key_len = checked_len(&what, key_len)?;
        let value_len = checked_len(&what, value_len)?;
        checked_len(&what, (key_len + value_len) as u64)?;
        let mut body = vec![0u8; key_len + value_len];
        if !body.is_empty() {
            let res =
                world.post_and_wait_on(c, &what, tag, &[], &mut [(source, &mut body[..])], || {});
            if let Err(e) = res {
                std::mem::forget(body);
                return Err(e);
            }
        }
        let (key, value) = body.split_at(key_len);
        let (kind, data) = match op {
            o if o == Op::Put as u64 => {
                map.put(key, value);
                (STORED, None)
            }
            o if o == Op::TryGet as u64 => match map.get(key) {
                Some(v) => (FOUND, Some(v)),
                None => (MISSING, None),
            },
            other => {
                return Err(Error::Invalid {
                    what,
                    reason: format!("unknown operation {other}"),
                });
            }
        };
        let data = data.unwrap_or_default();
        let answer = encode(&[kind, data.len() as u64]);
        let mut sends: Vec<(usize, &[u8])> = vec![(source, &answer)];
        if !data.is_empty() {
            sends.push((source, &data));
        }
        let res = world.post_and_wait_on(c, &what, tag, &sends, &mut [], || {});
        if let Err(e) = res {
            std::mem::forget((answer, data));
            return Err(e);
        }
    }
}

/// Waits for the next request's header in `header` and returns its
/// sender; `None` once the process finalizes MPI or the world failed.
/// There is no deadline: no rank waits for this receive, and polling stops
/// with the process.
fn next_request(
    world: &World,
    c: &Connected,
    tag: c_int,
    header: &mut [u8; REQUEST_LEN],
) -> Result<Option<usize>> {
    let mpi = &c.mpi;
    {
        let _guard = c.lock.lock().unwrap_or_else(|e| e.into_inner());
        if STOPPED.load(Ordering::SeqCst) {
            return Ok(None);
        }
        let mut r = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `header` is leaked by `serve`: it lives as long as the
        // process, however long the receive stays pending.
        let code = unsafe {
            (mpi.irecv)(
                header.as_mut_ptr().cast(),
                REQUEST_LEN as c_int,
                abi::BYTE,
                abi::ANY_SOURCE,
                tag,
                abi::COMM_WORLD,
                &mut *r,
            )
        };
        mpi.check("MPI_Irecv", code)?;
    }
    let start = Instant::now();
    loop {
        {
            let _guard = c.lock.lock().unwrap_or_else(|e| e.into_inner());
            if STOPPED.load(Ordering::SeqCst) || world.failure().is_some() {
                return Ok(None);
            }
            let mut r = PENDING.lock().unwrap_or_else(|e| e.into_inner());
            let mut done: c_int = 0;
            let mut status = abi::Status::default();
            // SAFETY: the live receive posted above.
            let code = unsafe { (mpi.test)(&mut *r, &mut done, &mut status) };
            mpi.check("MPI_Test", code)?;
            if done != 0 {
                *r = abi::REQUEST_NULL;
                return Ok(Some(status.source as usize));
            }
        }
        // Quick answers while ranks are asking (a client's creation asks
        // many times in a row), a light poll while they are not.
        if start.elapsed() < Duration::from_millis(50) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

fn encode(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn decode<const N: usize>(bytes: &[u8]) -> [u64; N] {
    std::array::from_fn(|i| u64::from_le_bytes(bytes[i * 8..][..8].try_into().expect("8 bytes")))
}

/// `len` as a length, or an error if no key or value is that long.
fn checked_len(what: &str, len: u64) -> Result<usize> {
    if len > MAX_LEN {
        return Err(Error::Invalid {
            what: what.into(),
            reason: format!("a length of {len} bytes (the most is {MAX_LEN}): a corrupt message"),
        });
    }
    Ok(len as usize)
}

fn lossy(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}
