//! The processes of a job (`MPI_COMM_WORLD`) and the collectives between
//! them, built on point-to-point messages.
//!
//! Each collective call site of a program has its own tag, and every wait
//! has a deadline: XLA may run independent collectives in any order or at
//! once, and a message only ever matches the same call site on the peer, so
//! no interleaving deadlocks; a peer that died or runs other code makes the
//! others return an [`Error::Timeout`] instead of hanging. After a failure
//! the world is [`Error::Broken`] for the rest of the process and is not
//! finalized (`MPI_Finalize` waits for the dead peer).

use std::ffi::{c_int, c_void};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::abi;
use crate::error::{Error, Result};
use crate::library::Mpi;
use crate::reduce::{Elem, ReduceOp, bytes, bytes_mut, elems, elems_mut, fold};

/// How long a rank polls its requests without sleeping: longer than a
/// large collective takes between processes that are all in it.
const SPIN: Duration = Duration::from_millis(20);

/// Messages are cut into pieces of at most this many bytes (MPI counts are
/// C `int`s).
const PIECE: usize = 1 << 30;

/// The deadline of a wait when `RADIX_MPI_TIMEOUT` does not set one.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The processes of the job this process belongs to.
pub struct World {
    rank: usize,
    size: usize,
    timeout: Duration,
    /// `None` for a process started alone: a world of one, without MPI.
    mpi: Option<Connected>,
    /// The first failure; once set, no MPI call is made again.
    failure: Mutex<Option<Error>>,
    /// Whether the collectives may send from and receive into the caller's
    /// memory ([`World::local`]), instead of copies of their own.
    local: bool,
    /// Buffers of finished exchanges, for the next ones: a fresh buffer of
    /// megabytes is a page fault per page (most of a large all-reduce's
    /// time, measured), a reused one none.
    spare: Mutex<Vec<Aligned>>,
}

/// Whether MPI touches a rank's memory only inside the MPI calls that rank
/// makes: every rank on this host (hydra's `MPI_LOCALNRANKS`; shared
/// memory and cross-memory attach move the data, no network card writes
/// on its own) and no asynchronous progress thread. Then nothing can touch
/// a buffer after an exchange that failed returned (this process makes no
/// MPI call again), and the collectives may use the caller's memory.
/// `RADIX_MPI_STAGED=1` turns it off (how the copies are tested on one
/// host).
fn local(size: usize) -> bool {
    let set = |v: &str| std::env::var(v).is_ok_and(|s| !matches!(s.trim(), "" | "0"));
    let ranks_here = std::env::var("MPI_LOCALNRANKS").ok();
    ranks_here.and_then(|s| s.trim().parse::<usize>().ok()) == Some(size)
        && !set("MPIR_CVAR_ASYNC_PROGRESS")
        && !set("MPICH_ASYNC_PROGRESS")
        && !set("RADIX_MPI_STAGED")
}

/// At most this many buffers wait in [`World::spare`].
const SPARE_BUFFERS: usize = 16;

pub(crate) struct Connected {
    pub(crate) mpi: Mpi,
    /// The largest tag the library takes (`MPI_TAG_UB`).
    tag_ub: u32,
    /// Held around each MPI call: the library is initialized for
    /// serialized calls at least, and XLA may call from several threads.
    pub(crate) lock: Mutex<()>,
}

static WORLD: OnceLock<Result<World>> = OnceLock::new();

/// Whether a process launcher started this process as one rank of a job
/// (hydra's `mpiexec`, `srun` with PMI or PMIx): then [`world`] joins MPI.
pub fn launched() -> bool {
    ["PMI_RANK", "PMI_FD", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// The job's processes: with [`launched`], MPI is opened (the library of
/// [`crate::library_path`]) and initialized once per process; otherwise a
/// world of one process that never loads MPI. The first call's error is
/// every call's.
pub fn world() -> Result<&'static World> {
    WORLD
        .get_or_init(World::join)
        .as_ref()
        .map_err(Clone::clone)
}

/// A buffer of bytes aligned for every [`Elem`] type.
struct Aligned {
    words: Vec<u64>,
    len: usize,
}

impl Aligned {
    fn zeroed(len: usize) -> Aligned {
        Aligned {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }

    fn bytes(&self) -> &[u8] {
        &bytes(&self.words)[..self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytes_mut(&mut self.words)[..self.len]
    }
}

impl World {
    fn join() -> Result<World> {
        let timeout = match std::env::var("RADIX_MPI_TIMEOUT") {
            Ok(s) => s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|t| t.is_finite() && *t > 0.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| Error::Invalid {
                    what: "RADIX_MPI_TIMEOUT".into(),
                    reason: format!("{s:?} is not a positive number of seconds"),
                })?,
            Err(_) => DEFAULT_TIMEOUT,
        };
        if !launched() {
            return Ok(World {
                rank: 0,
                size: 1,
                timeout,
                mpi: None,
                failure: Mutex::new(None),
                local: false,
                spare: Mutex::new(vec![]),
            });
        }
        let mpi = Mpi::open(&crate::fetch::library_path()?)?;
        let mpi = init(mpi, timeout)?;
        crate::heap::keep_freed_results();
        // SAFETY: MPI is initialized; WORLD and ERRORS_RETURN are builtin.
        let code = unsafe { (mpi.set_errhandler)(abi::COMM_WORLD, abi::ERRORS_RETURN) };
        mpi.check("MPI_Comm_set_errhandler", code)?;
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: out-pointers to ints.
        mpi.check("MPI_Comm_rank", unsafe {
            (mpi.comm_rank)(abi::COMM_WORLD, &mut rank)
        })?;
        // SAFETY: as above.
        mpi.check("MPI_Comm_size", unsafe {
            (mpi.comm_size)(abi::COMM_WORLD, &mut size)
        })?;
        let mut value: *const c_int = std::ptr::null();
        let mut found: c_int = 0;
        // SAFETY: for a builtin integer attribute MPI writes a pointer to
        // its int into `value`.
        let code = unsafe {
            (mpi.get_attr)(
                abi::COMM_WORLD,
                abi::TAG_UB,
                (&mut value as *mut *const c_int).cast::<c_void>(),
                &mut found,
            )
        };
        mpi.check("MPI_Comm_get_attr", code)?;
        // The standard guarantees tags up to 32767.
        let tag_ub = if found != 0 && !value.is_null() {
            // SAFETY: MPI's pointer to the attribute's int.
            unsafe { *value }.max(32767) as u32
        } else {
            32767
        };
        Ok(World {
            rank: rank as usize,
            size: size as usize,
            timeout,
            mpi: Some(Connected {
                mpi,
                tag_ub,
                lock: Mutex::new(()),
            }),
            failure: Mutex::new(None),
            local: local(size as usize),
            spare: Mutex::new(vec![]),
        })
    }

    /// This process's rank, from 0.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// How long a collective waits for its peers before it gives up.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether MPI is in use (the process was [`launched`]).
    pub fn uses_mpi(&self) -> bool {
        self.mpi.is_some()
    }

    /// The MPI library's version text, if MPI is in use.
    pub fn library_version(&self) -> Option<Result<String>> {
        self.mpi.as_ref().map(|c| c.mpi.version())
    }

    /// `out` (`size` blocks as long as `x`) receives rank `i`'s `x` in
    /// block `i`. `site` tells this call site from the program's others.
    pub fn all_gather<T: Elem>(&self, site: u32, x: &[T], out: &mut [T]) -> Result<()> {
        let what = "all_gather";
        self.check_len(what, out.len(), x.len() * self.size)?;
        let sends = self.others().map(|p| (p, bytes(x))).collect::<Vec<_>>();
        let recvs = self.others().map(|p| (p, bytes(x).len())).collect();
        let got = self.exchange(what, site, &sends, recvs)?;
        let n = x.len();
        out[self.rank * n..][..n].copy_from_slice(x);
        for (p, data) in &got {
            out[p * n..][..n].copy_from_slice(elems(data.bytes()));
        }
        self.recycle(got.into_iter().map(|g| g.1));
        Ok(())
    }

    /// `out` = every rank's `x` folded with `op` in rank order
    /// ([`fold`]): the same bits on every rank. `x` is cut into one block
    /// per rank (of lengths differing by at most one); each rank folds its
    /// block of every rank's `x`, then every rank gathers the folded blocks,
    /// so each rank sends and receives about twice `x`, whatever the number
    /// of ranks.
    pub fn all_reduce<T: Elem>(
        &self,
        site: u32,
        op: ReduceOp,
        x: &[T],
        out: &mut [T],
    ) -> Result<()> {
        let what = "all_reduce";
        self.check_len(what, out.len(), x.len())?;
        if self.local {
            return self.all_reduce_in_place(site, op, x, out);
        }
        let block = |p: usize| self.block(x.len(), p);
        let mine = block(self.rank);
        // Both phases use the site's tag: a peer's second message to this
        // rank cannot overtake its first (MPI orders messages between two
        // ranks with one tag), and this rank posts the first receive first.
        let sends: Vec<(usize, &[u8])> = self.others().map(|p| (p, bytes(&x[block(p)]))).collect();
        let recvs = self
            .others()
            .map(|p| (p, mine.len() * size_of::<T>()))
            .collect();
        let got = self.exchange(what, site, &sends, recvs)?;
        // Folded straight into the buffer that goes to every peer, and
        // copied into `out` while they read it.
        let mut folded = self.buffer(mine.len() * size_of::<T>());
        self.fold_shares(op, &x[mine.clone()], &got, elems_mut(folded.bytes_mut()));
        self.recycle(got.into_iter().map(|g| g.1));
        let targets = self.others().map(|p| (p, 0)).collect();
        let recvs = self
            .others()
            .map(|p| (p, block(p).len() * size_of::<T>()))
            .collect();
        let got = self.exchange_owned(what, site, vec![folded], targets, recvs, |sent| {
            out[mine.clone()].copy_from_slice(elems(sent[0].bytes()));
        })?;
        for (p, data) in &got {
            out[block(*p)].copy_from_slice(elems(data.bytes()));
        }
        self.recycle(got.into_iter().map(|g| g.1));
        Ok(())
    }

    /// [`World::all_reduce`] without copies of its own ([`World::local`]):
    /// the peers' shares of this rank's block arrive in spare buffers
    /// straight from their `x`, are folded into `out`, and the folded
    /// blocks go from each rank's `out` straight into the others'.
    fn all_reduce_in_place<T: Elem>(
        &self,
        site: u32,
        op: ReduceOp,
        x: &[T],
        out: &mut [T],
    ) -> Result<()> {
        let what = "all_reduce";
        let (n, me) = (self.size, self.rank);
        let block = |p: usize| self.block(x.len(), p);
        let mine = block(me);
        let mut shares: Vec<(usize, Aligned)> = self
            .others()
            .map(|p| (p, self.buffer(mine.len() * size_of::<T>())))
            .collect();
        let sends: Vec<(usize, &[u8])> = self.others().map(|p| (p, bytes(&x[block(p)]))).collect();
        let mut recvs: Vec<(usize, &mut [u8])> = shares
            .iter_mut()
            .map(|(p, b)| (*p, b.bytes_mut()))
            .collect();
        self.exchange_on(what, site, &sends, &mut recvs)?;
        self.fold_shares(op, &x[mine.clone()], &shares, &mut out[mine.clone()]);
        self.recycle(shares.into_iter().map(|s| s.1));
        // `out` cut into the ranks' blocks: this rank's is sent, the
        // others' are received in place.
        let (mut rest, mut folded): (&mut [T], &[T]) = (out, &[]);
        let mut recvs: Vec<(usize, &mut [u8])> = vec![];
        for p in 0..n {
            let (chunk, tail) = rest.split_at_mut(block(p).len());
            rest = tail;
            if p == me {
                folded = chunk;
            } else {
                recvs.push((p, bytes_mut(chunk)));
            }
        }
        let sends: Vec<(usize, &[u8])> = self.others().map(|p| (p, bytes(folded))).collect();
        self.exchange_on(what, site, &sends, &mut recvs)
    }

    /// Block `p` of `len` values cut into one block per rank (of lengths
    /// differing by at most one), as the all-reduce cuts its input.
    fn block(&self, len: usize, p: usize) -> std::ops::Range<usize> {
        p * len / self.size..(p + 1) * len / self.size
    }

    /// This rank's block of an all-reduce: its own share `own` and the
    /// peers' `shares` (by rank) folded in rank order into `out`.
    fn fold_shares<T: Elem>(
        &self,
        op: ReduceOp,
        own: &[T],
        shares: &[(usize, Aligned)],
        out: &mut [T],
    ) {
        let parts: Vec<&[T]> = (0..self.size)
            .map(|p| match shares.iter().find(|s| s.0 == p) {
                Some((_, data)) => elems(data.bytes()),
                None => own,
            })
            .collect();
        fold(op, &parts, out);
    }

    /// `x` holds `size` blocks as long as `out`; `out` = block `rank` of
    /// every rank's `x`, folded with `op` in rank order.
    pub fn reduce_scatter<T: Elem>(
        &self,
        site: u32,
        op: ReduceOp,
        x: &[T],
        out: &mut [T],
    ) -> Result<()> {
        self.check_len("reduce_scatter", x.len(), out.len() * self.size)?;
        let mut blocks = vec![zero::<T>(); x.len()];
        self.all_to_all(site, x, &mut blocks)?;
        if out.is_empty() {
            return Ok(());
        }
        let parts: Vec<&[T]> = blocks.chunks(out.len()).collect();
        fold(op, &parts, out);
        Ok(())
    }

    /// `x` and `out` hold `size` equal blocks: block `j` of `x` goes to rank
    /// `j`, and block `i` of `out` comes from rank `i`.
    pub fn all_to_all<T: Elem>(&self, site: u32, x: &[T], out: &mut [T]) -> Result<()> {
        let what = "all_to_all";
        self.check_len(what, out.len(), x.len())?;
        if !x.len().is_multiple_of(self.size) {
            return Err(Error::Invalid {
                what: what.into(),
                reason: format!(
                    "{} values do not split into {} equal blocks",
                    x.len(),
                    self.size
                ),
            });
        }
        let n = x.len() / self.size;
        let block = |p: usize| &x[p * n..][..n];
        let sends = self
            .others()
            .map(|p| (p, bytes(block(p))))
            .collect::<Vec<_>>();
        let recvs = self.others().map(|p| (p, n * size_of::<T>())).collect();
        let got = self.exchange(what, site, &sends, recvs)?;
        out[self.rank * n..][..n].copy_from_slice(block(self.rank));
        for (p, data) in &got {
            out[p * n..][..n].copy_from_slice(elems(data.bytes()));
        }
        self.recycle(got.into_iter().map(|g| g.1));
        Ok(())
    }

    /// Sends `x` along `pairs` (`(source, destination)` ranks; no rank twice
    /// as a source nor twice as a destination): `out` = the `x` of the rank
    /// whose pair ends here, or zeros if none does.
    pub fn permute<T: Elem>(
        &self,
        site: u32,
        pairs: &[(usize, usize)],
        x: &[T],
        out: &mut [T],
    ) -> Result<()> {
        let what = "ppermute";
        self.check_len(what, out.len(), x.len())?;
        check_pairs(pairs, self.size).map_err(|reason| Error::Invalid {
            what: what.into(),
            reason,
        })?;
        let to = pairs.iter().find(|p| p.0 == self.rank).map(|p| p.1);
        let from = pairs.iter().find(|p| p.1 == self.rank).map(|p| p.0);
        let sends: Vec<(usize, &[u8])> = to
            .filter(|&d| d != self.rank)
            .map(|d| (d, bytes(x)))
            .into_iter()
            .collect();
        let recvs = from
            .filter(|&s| s != self.rank)
            .map(|s| (s, bytes(x).len()))
            .into_iter()
            .collect();
        let got = self.exchange(what, site, &sends, recvs)?;
        match from {
            None => out.fill(zero()),
            Some(s) if s == self.rank => out.copy_from_slice(x),
            Some(_) => out.copy_from_slice(elems(got[0].1.bytes())),
        }
        self.recycle(got.into_iter().map(|g| g.1));
        Ok(())
    }

    fn others(&self) -> impl Iterator<Item = usize> + use<> {
        let (rank, size) = (self.rank, self.size);
        (0..size).filter(move |&p| p != rank)
    }

    fn check_len(&self, what: &str, got: usize, want: usize) -> Result<()> {
        if got == want {
            Ok(())
        } else {
            Err(Error::Invalid {
                what: what.into(),
                reason: format!("{got} values where {want} are needed ({} ranks)", self.size),
            })
        }
    }

    /// A buffer of `len` bytes (contents unspecified): a spare one that is
    /// large enough, else a new one.
    fn buffer(&self, len: usize) -> Aligned {
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        match spare.iter().position(|b| b.words.len() * 8 >= len) {
            Some(i) => {
                let mut b = spare.swap_remove(i);
                b.len = len;
                b
            }
            None => Aligned::zeroed(len),
        }
    }

    /// `data` copied into a buffer of the exchange's own.
    fn buffer_of(&self, data: &[u8]) -> Aligned {
        let mut b = self.buffer(data.len());
        b.bytes_mut().copy_from_slice(data);
        b
    }

    /// Keeps `buffers` for later exchanges (up to [`SPARE_BUFFERS`]).
    fn recycle(&self, buffers: impl IntoIterator<Item = Aligned>) {
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        for b in buffers {
            if spare.len() < SPARE_BUFFERS {
                spare.push(b);
            }
        }
    }

    /// Sends each `(peer, data)` and receives `len` bytes from each
    /// `(peer, len)`, all with the tag of `site`, within the deadline.
    /// Buffers are the exchange's own (the data is copied into them first):
    /// after a timeout MPI may still use them, so they are leaked rather
    /// than freed. The caller gives the received ones back through
    /// [`World::recycle`].
    fn exchange(
        &self,
        what: &str,
        site: u32,
        sends: &[(usize, &[u8])],
        recvs: Vec<(usize, usize)>,
    ) -> Result<Vec<(usize, Aligned)>> {
        let outgoing = sends.iter().map(|(_, d)| self.buffer_of(d)).collect();
        let targets = sends.iter().enumerate().map(|(i, s)| (s.0, i)).collect();
        self.exchange_owned(what, site, outgoing, targets, recvs, |_| {})
    }

    /// [`World::exchange`] of buffers the exchange already owns: each
    /// `(peer, i)` of `targets` sends `outgoing[i]` to `peer`. `meanwhile`
    /// runs once every message is posted, while the peers read and write
    /// (it sees the outgoing buffers).
    fn exchange_owned(
        &self,
        what: &str,
        site: u32,
        outgoing: Vec<Aligned>,
        targets: Vec<(usize, usize)>,
        recvs: Vec<(usize, usize)>,
        meanwhile: impl FnOnce(&[Aligned]),
    ) -> Result<Vec<(usize, Aligned)>> {
        if targets.is_empty() && recvs.is_empty() && self.failure().is_none() {
            meanwhile(&outgoing);
            self.recycle(outgoing);
            return Ok(vec![]);
        }
        let (c, tag) = self.connected(what, site)?;
        let res = self.post_and_wait(c, what, tag, (outgoing, targets), recvs, meanwhile);
        self.record(res)
    }

    /// [`World::exchange`] on the caller's memory: only where nothing can
    /// touch it after a failure ([`World::local`]).
    fn exchange_on(
        &self,
        what: &str,
        site: u32,
        sends: &[(usize, &[u8])],
        recvs: &mut [(usize, &mut [u8])],
    ) -> Result<()> {
        debug_assert!(self.local);
        let (c, tag) = self.connected(what, site)?;
        let res = self.post_and_wait_on(c, what, tag, sends, recvs, || {});
        self.record(res)
    }

    /// The first failure, if any.
    pub(crate) fn failure(&self) -> Option<Error> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// MPI and the tag of `site`, unless a failure broke the world or the
    /// process has no peers.
    fn connected(&self, what: &str, site: u32) -> Result<(&Connected, c_int)> {
        if let Some(e) = self.failure() {
            return Err(Error::Broken(e.to_string()));
        }
        let Some(c) = &self.mpi else {
            return Err(Error::Invalid {
                what: what.into(),
                reason: "a process started alone has no peers to exchange with".into(),
            });
        };
        // The largest tag is the key-value store's (`crate::kv`).
        Ok((c, (site % c.tag_ub) as c_int))
    }

    /// MPI and the key-value store's tag, the largest one, which no
    /// collective uses; `Ok(None)` for a process started alone.
    pub(crate) fn store_channel(&self) -> Result<Option<(&Connected, c_int)>> {
        if let Some(e) = self.failure() {
            return Err(Error::Broken(e.to_string()));
        }
        Ok(self.mpi.as_ref().map(|c| (c, c.tag_ub as c_int)))
    }

    /// `res`, its error kept as the world's failure.
    pub(crate) fn record<R>(&self, res: Result<R>) -> Result<R> {
        if let Err(e) = &res {
            let mut failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
            failure.get_or_insert_with(|| e.clone());
        }
        res
    }

    fn post_and_wait(
        &self,
        c: &Connected,
        what: &str,
        tag: c_int,
        (outgoing, targets): (Vec<Aligned>, Vec<(usize, usize)>),
        recvs: Vec<(usize, usize)>,
        meanwhile: impl FnOnce(&[Aligned]),
    ) -> Result<Vec<(usize, Aligned)>> {
        let mut out: Vec<(usize, Aligned)> = recvs
            .iter()
            .map(|&(p, len)| (p, self.buffer(len)))
            .collect();
        let res = {
            let sends: Vec<(usize, &[u8])> = targets
                .iter()
                .map(|&(p, i)| (p, outgoing[i].bytes()))
                .collect();
            let mut recvs: Vec<(usize, &mut [u8])> =
                out.iter_mut().map(|(p, b)| (*p, b.bytes_mut())).collect();
            self.post_and_wait_on(c, what, tag, &sends, &mut recvs, || meanwhile(&outgoing))
        };
        match res {
            Ok(()) => {
                self.recycle(outgoing);
                Ok(out)
            }
            Err(e) => {
                // MPI may still write into or read from these.
                std::mem::forget(out);
                std::mem::forget(outgoing);
                Err(e)
            }
        }
    }

    /// Posts a receive into each `(peer, buffer)` of `recvs` and a send of
    /// each `(peer, data)` of `sends`, runs `meanwhile`, and waits for them
    /// all. After a failure the requests are cancelled, but MPI may still
    /// use the memory: the caller leaks buffers it owns, and passes memory
    /// it does not own only where nothing can touch it afterwards
    /// ([`World::local`]).
    pub(crate) fn post_and_wait_on(
        &self,
        c: &Connected,
        what: &str,
        tag: c_int,
        sends: &[(usize, &[u8])],
        recvs: &mut [(usize, &mut [u8])],
        meanwhile: impl FnOnce(),
    ) -> Result<()> {
        let mpi = &c.mpi;
        // (peer, request) for every piece of every message.
        let mut requests: Vec<(usize, abi::Request)> = vec![];
        let posted = (|| {
            let _guard = c.lock.lock().unwrap_or_else(|e| e.into_inner());
            for (peer, buf) in recvs.iter_mut() {
                let peer = *peer;
                for piece in buf.chunks_mut(PIECE) {
                    let mut r = abi::REQUEST_NULL;
                    // SAFETY: the piece stays allocated until the request
                    // completes (or, after a failure, as the caller ensures).
                    let code = unsafe {
                        (mpi.irecv)(
                            piece.as_mut_ptr().cast(),
                            piece.len() as c_int,
                            abi::BYTE,
                            peer as c_int,
                            tag,
                            abi::COMM_WORLD,
                            &mut r,
                        )
                    };
                    mpi.check("MPI_Irecv", code)?;
                    requests.push((peer, r));
                }
            }
            for &(peer, data) in sends {
                for piece in data.chunks(PIECE) {
                    let mut r = abi::REQUEST_NULL;
                    // SAFETY: as above.
                    let code = unsafe {
                        (mpi.isend)(
                            piece.as_ptr().cast(),
                            piece.len() as c_int,
                            abi::BYTE,
                            peer as c_int,
                            tag,
                            abi::COMM_WORLD,
                            &mut r,
                        )
                    };
                    mpi.check("MPI_Isend", code)?;
                    requests.push((peer, r));
                }
            }
            Ok(())
        })();
        let res = posted.and_then(|()| {
            meanwhile();
            self.wait(c, what, &mut requests)
        });
        if res.is_err() {
            let _guard = c.lock.lock().unwrap_or_else(|e| e.into_inner());
            for (_, r) in &mut requests {
                if *r != abi::REQUEST_NULL {
                    // SAFETY: a request this exchange posted.
                    unsafe { (mpi.cancel)(r) };
                }
            }
        }
        res
    }

    /// Waits for every request, polling (spinning for [`SPIN`], then
    /// sleeping a little longer each time) until the deadline.
    fn wait(
        &self,
        c: &Connected,
        what: &str,
        requests: &mut [(usize, abi::Request)],
    ) -> Result<()> {
        let start = Instant::now();
        let mut polls = 0u32;
        loop {
            let mut pending = false;
            {
                let _guard = c.lock.lock().unwrap_or_else(|e| e.into_inner());
                for (_, r) in requests.iter_mut() {
                    if *r == abi::REQUEST_NULL {
                        continue;
                    }
                    let mut done: c_int = 0;
                    let mut status = abi::Status::default();
                    // SAFETY: a live request of this exchange.
                    let code = unsafe { (c.mpi.test)(r, &mut done, &mut status) };
                    c.mpi.check("MPI_Test", code)?;
                    pending |= done == 0;
                }
            }
            if !pending {
                return Ok(());
            }
            if start.elapsed() > self.timeout {
                let mut peers: Vec<usize> = requests
                    .iter()
                    .filter(|r| r.1 != abi::REQUEST_NULL)
                    .map(|r| r.0)
                    .collect();
                peers.dedup();
                return Err(Error::Timeout {
                    what: what.into(),
                    rank: self.rank,
                    peers,
                    seconds: self.timeout.as_secs(),
                });
            }
            // Spin first: a large message between processes moves only
            // while some MPI call runs on each side (MPICH's shared-memory
            // transport copies it through a ring of cells), so every sleep
            // stalls it. Only a peer that is late (still computing, or
            // dead) makes a rank sleep, a little longer each time.
            if start.elapsed() < SPIN {
                std::thread::yield_now();
            } else {
                polls += 1;
                std::thread::sleep(Duration::from_micros(20 + u64::from(polls.min(1000))));
            }
        }
    }
}

/// Initializes MPI on a thread of its own, within `timeout`: `MPI_Init`
/// waits for every rank of the job, and a rank that died before it would
/// otherwise hang this one.
fn init(mpi: Mpi, timeout: Duration) -> Result<Mpi> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let res = (|| {
            let mut flag: c_int = 0;
            // SAFETY: MPI_Initialized may be called at any time.
            mpi.check("MPI_Initialized", unsafe { (mpi.initialized)(&mut flag) })?;
            if flag != 0 {
                return Ok(());
            }
            let mut provided: c_int = 0;
            // SAFETY: null argc/argv are allowed; called once per process
            // (`world`'s `OnceLock`).
            let code = unsafe {
                (mpi.init_thread)(
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    abi::THREAD_MULTIPLE,
                    &mut provided,
                )
            };
            mpi.check("MPI_Init_thread", code)?;
            // SAFETY: a plain C function with no arguments, run at exit.
            unsafe { libc::atexit(finalize_at_exit) };
            if provided < abi::THREAD_MULTIPLE {
                // Initialized on this thread, used from XLA's: only a
                // library that allows every thread will do.
                return Err(Error::Library {
                    path: mpi.path().to_path_buf(),
                    reason: format!(
                        "it offers thread level {provided}; radix calls MPI from XLA's threads and needs MPI_THREAD_MULTIPLE (3)"
                    ),
                });
            }
            Ok(())
        })();
        let _ = tx.send(res.map(|()| mpi));
    });
    match rx.recv_timeout(timeout) {
        Ok(res) => res,
        Err(_) => Err(Error::Timeout {
            what: "MPI_Init".into(),
            rank: std::env::var("PMI_RANK")
                .ok()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0),
            peers: vec![],
            seconds: timeout.as_secs(),
        }),
    }
}

/// Checks `(source, destination)` pairs of a permutation over `size` ranks.
pub fn check_pairs(pairs: &[(usize, usize)], size: usize) -> std::result::Result<(), String> {
    for (i, &(s, d)) in pairs.iter().enumerate() {
        if s >= size || d >= size {
            return Err(format!("pair ({s}, {d}) names a rank outside 0..{size}"));
        }
        if pairs[..i].iter().any(|p| p.0 == s || p.1 == d) {
            return Err(format!("rank {s} sends twice or rank {d} receives twice"));
        }
    }
    Ok(())
}

fn zero<T: Elem>() -> T {
    // SAFETY: every bit pattern of an `Elem` type is a value.
    unsafe { std::mem::zeroed() }
}

/// Finalizes MPI at exit unless a collective failed (`MPI_Finalize` then
/// waits for peers that may be dead). A finalize that does not end within
/// the deadline ends the process with status 1 instead of hanging it.
extern "C" fn finalize_at_exit() {
    let Some(Ok(world)) = WORLD.get() else { return };
    let Some(c) = &world.mpi else { return };
    if world.failure.lock().map_or(true, |f| f.is_some()) {
        return;
    }
    let mut done: c_int = 0;
    // SAFETY: MPI_Finalized may be called at any time.
    if unsafe { (c.mpi.finalized)(&mut done) } != abi::SUCCESS || done != 0 {
        return;
    }
    let timeout = world.timeout;
    std::thread::spawn(move || {
        std::thread::sleep(timeout);
        eprintln!(
            "radix: MPI_Finalize did not end within {} s; exiting",
            timeout.as_secs()
        );
        // SAFETY: ends the process at once, as a failed exit.
        unsafe { libc::_exit(1) };
    });
    let _guard = c.lock.lock().unwrap_or_else(|e| e.into_inner());
    crate::kv::stop_service(&c.mpi);
    // SAFETY: initialized by `join`, finalized only here, once.
    unsafe { (c.mpi.finalize)() };
}
