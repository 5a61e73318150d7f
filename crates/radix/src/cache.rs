//! The on-disk executable cache: compiled executables by the hash of what
//! determines them.
//!
//! The key ([`CacheKey::new`]) is the xxh64 of the module text printed
//! *without* source locations (so moving code around keeps the key), the
//! serialized compile options, the plugin file's sha256 and its PJRT API
//! version. An entry is `<dir>/<key:016x>.pjrt`: a 36-byte header (magic,
//! format version, key, payload length, payload xxh64) and the plugin's
//! serialized executable. The header lets a truncated, corrupt or foreign
//! file be recognized before the plugin sees its bytes.
//!
//! Entries are written to a temporary file in the same folder and renamed
//! into place, so a reader sees a whole entry or none, and two processes
//! storing the same key at once both succeed (the last rename wins; both
//! files are equally good).
//!
//! The folder has a size budget ([`ExecutableCache::max_bytes`]: 2 GiB, or
//! `RADIX_CACHE_MAX_BYTES`; 0 is unlimited). After each store the least
//! recently used entries (oldest modification time; a load touches its
//! entry) are deleted until the entries fit, never the one just written and
//! never a temporary file another process is writing. Two processes evicting
//! at once are safe: an entry already gone is simply not counted.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use radix_pjrt::{Client, LoadedExecutable, Plugin};
use xxhash_rust::xxh64::Xxh64;

use crate::{Program, Result};

/// What identifies a compiled executable: see the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey(u64);

/// Where an [`crate::Executable`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Compiled by the plugin in this process.
    Compiled,
    /// Loaded from the executable cache.
    Cache,
}

/// A folder of cached executables.
#[derive(Debug, Clone)]
pub struct ExecutableCache {
    dir: PathBuf,
    max_bytes: u64,
}

/// The default size budget of an [`ExecutableCache`]: 2 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;

/// The variable that sets an [`ExecutableCache`]'s size budget in bytes
/// (0: unlimited).
pub const MAX_BYTES_VAR: &str = "RADIX_CACHE_MAX_BYTES";

/// One entry of an [`ExecutableCache`].
#[derive(Debug, Clone)]
pub struct CacheEntry {
    /// The key, from the file name.
    pub key: CacheKey,
    /// The file.
    pub path: PathBuf,
    /// The file's size in bytes.
    pub size: u64,
    /// When it was last written or loaded.
    pub modified: Option<SystemTime>,
}

/// Why a cache entry could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The file is shorter than its header says.
    #[error("truncated: {got} bytes, the header needs {expected}")]
    Truncated {
        /// The length the header announces.
        expected: u64,
        /// The file's length.
        got: u64,
    },
    /// The file is not a radix cache entry of this format version.
    #[error("not a radix executable cache entry (bad magic or version)")]
    Foreign,
    /// The header names another key (a file copied or renamed by hand).
    #[error("the entry is for key {found:016x}")]
    OtherKey {
        /// The key the header holds.
        found: u64,
    },
    /// The payload does not match its code (a keyed SHA-256: changed or
    /// damaged since this cache stored it, or stored with another key).
    #[error("authentication code mismatch: changed since radix stored it")]
    Corrupt,
}

/// What of this host changes the code XLA generates, beyond the module,
/// options and plugin: `XLA_FLAGS`, and on x86-64 the vector extensions
/// XLA:CPU compiles for.
pub fn host_fingerprint() -> String {
    let flags = std::env::var("XLA_FLAGS").unwrap_or_default();
    format!("XLA_FLAGS={flags};cpu={}", cpu_features())
}

/// The x86-64 extensions XLA:CPU may use, as detected here.
#[cfg(target_arch = "x86_64")]
fn cpu_features() -> String {
    let detected = [
        ("avx", std::arch::is_x86_feature_detected!("avx")),
        ("avx2", std::arch::is_x86_feature_detected!("avx2")),
        ("fma", std::arch::is_x86_feature_detected!("fma")),
        ("f16c", std::arch::is_x86_feature_detected!("f16c")),
        ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
        ("avx512bw", std::arch::is_x86_feature_detected!("avx512bw")),
        ("avx512vl", std::arch::is_x86_feature_detected!("avx512vl")),
        ("avx512dq", std::arch::is_x86_feature_detected!("avx512dq")),
        (
            "avx512vnni",
            std::arch::is_x86_feature_detected!("avx512vnni"),
        ),
        (
            "avx512bf16",
            std::arch::is_x86_feature_detected!("avx512bf16"),
        ),
    ];
    let names: Vec<&str> = detected.iter().filter(|f| f.1).map(|f| f.0).collect();
    names.join(",")
}

/// Other architectures: the architecture's name.
#[cfg(not(target_arch = "x86_64"))]
fn cpu_features() -> String {
    std::env::consts::ARCH.to_string()
}

const MAGIC: &[u8; 8] = b"RADIXEXE";
const VERSION: u32 = 2;
/// Magic, version, key, payload length, and the HMAC-SHA256 of all of it
/// and the payload.
const HEADER: usize = 8 + 4 + 8 + 8 + 32;
/// The cache folder's secret key for the entries' codes.
const SECRET: &str = ".secret";
const EXTENSION: &str = "pjrt";

impl CacheKey {
    /// The key of `module_text` (printed without locations) compiled with
    /// `options` (serialized compile options) by `plugin` for devices of
    /// the kinds `device_kinds` (a GPU model: code for one does not run on
    /// another) on this host ([`host_fingerprint`]: an executable built
    /// where AVX-512 exists must not be loaded where it does not).
    pub fn new(
        module_text: &str,
        options: &[u8],
        plugin: &Plugin,
        device_kinds: &[&str],
    ) -> Result<CacheKey> {
        let (major, minor) = plugin.api_version();
        let host = format!("{};devices={}", host_fingerprint(), device_kinds.join(","));
        Ok(CacheKey::from_parts(
            module_text,
            options,
            plugin.sha256()?,
            (major, minor),
            &host,
        ))
    }

    /// The key of the given parts (each is length-prefixed, so no two
    /// different tuples hash the same bytes).
    pub fn from_parts(
        module_text: &str,
        options: &[u8],
        plugin_sha256: &str,
        api_version: (i32, i32),
        host: &str,
    ) -> CacheKey {
        let mut h = Xxh64::new(0);
        for part in [
            module_text.as_bytes(),
            options,
            plugin_sha256.as_bytes(),
            &api_version.0.to_le_bytes(),
            &api_version.1.to_le_bytes(),
            host.as_bytes(),
        ] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part);
        }
        CacheKey(h.digest())
    }

    /// The 64-bit hash.
    pub fn value(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl ExecutableCache {
    /// The cache in `dir` (created when the first entry is stored), with
    /// the size budget of `RADIX_CACHE_MAX_BYTES`, else
    /// [`DEFAULT_MAX_BYTES`].
    pub fn new(dir: &Path) -> ExecutableCache {
        let max_bytes = max_bytes_from(std::env::var(MAX_BYTES_VAR).ok().as_deref());
        ExecutableCache {
            dir: dir.to_path_buf(),
            max_bytes,
        }
    }

    /// The same cache with a size budget of `max_bytes` (0: unlimited).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> ExecutableCache {
        self.max_bytes = max_bytes;
        self
    }

    /// The size budget of the entries in bytes; 0 is unlimited.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The default folder: `executables/` in the radix cache folder
    /// (`$RADIX_CACHE_DIR`, else the user's cache folder + `/radix`), if
    /// there is one.
    pub fn default_dir() -> Option<PathBuf> {
        radix_pjrt::provision::cache_dir()
            .ok()
            .map(|d| d.join("executables"))
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `key`.
    pub fn path(&self, key: CacheKey) -> PathBuf {
        self.dir.join(format!("{key}.{EXTENSION}"))
    }

    /// The marker that names the process loading `key`'s entry (see
    /// `cache::load`); a dot-file, removed by [`ExecutableCache::clear`].
    pub fn loading_marker(&self, key: CacheKey) -> PathBuf {
        self.dir.join(format!(".{key}.loading.tmp"))
    }

    /// The serialized executable stored under `key`: `Ok(None)` when there
    /// is none, `Ok(Some(Err(_)))` when the file is unusable.
    pub fn load(
        &self,
        key: CacheKey,
    ) -> std::io::Result<Option<std::result::Result<Vec<u8>, EntryError>>> {
        if !self.dir.exists() {
            return Ok(None);
        }
        untrusted_as_io(radix_pjrt::provision::check_private(&self.dir))?;
        let path = self.path(key);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let entry = decode(&self.secret()?, key, bytes);
                if entry.is_ok() {
                    // Recently used: the last to be evicted.
                    touch(&path);
                }
                Ok(Some(entry))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A temporary file's path for `stem`, of its own to this call: the
    /// process and a counter in its name, so that neither another process
    /// nor another thread writes or removes it (the sweep of stale entries
    /// knows it by its leading `.` and trailing `.tmp`).
    fn tmp_path(&self, stem: &str) -> PathBuf {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        self.dir.join(format!(
            ".{stem}.{}.{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// Stores `payload` under `key` atomically (temporary file + rename).
    pub fn store(&self, key: CacheKey, payload: &[u8]) -> std::io::Result<PathBuf> {
        untrusted_as_io(radix_pjrt::provision::private_dir(&self.dir))?;
        let path = self.path(key);
        let tmp = self.tmp_path(&key.to_string());
        let res = (|| {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(&encode(&self.secret()?, key, payload))?;
            file.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if res.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        res?;
        if let Err(e) = self.evict(Some(&path)) {
            tracing::warn!(
                "cannot keep the executable cache {} within {} bytes: {e}",
                self.dir.display(),
                self.max_bytes
            );
        }
        Ok(path)
    }

    /// Deletes the least recently used entries (oldest modification time
    /// first) until the entries' sizes add up to at most
    /// [`ExecutableCache::max_bytes`], never `keep`; returns those deleted.
    /// Only `<key>.pjrt` files count and go: temporary files, markers and
    /// the secret are left alone. An entry another process deleted
    /// meanwhile is not counted.
    pub fn evict(&self, keep: Option<&Path>) -> std::io::Result<Vec<CacheEntry>> {
        if self.max_bytes == 0 {
            return Ok(vec![]);
        }
        let mut entries = self.list()?;
        let mut total: u64 = entries.iter().map(|e| e.size).sum();
        if total <= self.max_bytes {
            return Ok(vec![]);
        }
        entries.sort_by_key(|e| (e.modified, e.key.0));
        let mut evicted = vec![];
        for entry in entries {
            if total <= self.max_bytes {
                break;
            }
            if keep == Some(entry.path.as_path()) {
                continue;
            }
            match std::fs::remove_file(&entry.path) {
                Ok(()) => {
                    tracing::debug!("evicted {} from the executable cache", entry.path.display());
                    total -= entry.size;
                    evicted.push(entry);
                }
                // Another process evicted it first.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => total -= entry.size,
                Err(e) => return Err(e),
            }
        }
        Ok(evicted)
    }

    /// The folder's secret key for the entries' codes: 32 random bytes in
    /// a file only its owner can read, made by the first process that needs
    /// it. An entry is machine code, and an unkeyed checksum can be made to
    /// match an edited one; without this key a changed entry cannot.
    fn secret(&self) -> std::io::Result<[u8; 32]> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.dir.join(SECRET);
        let read = |path: &Path| -> std::io::Result<[u8; 32]> {
            std::fs::read(path)?
                .try_into()
                .map_err(|_| std::io::Error::other(format!("{} is not 32 bytes", path.display())))
        };
        match read(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            res => return res,
        }
        let mut secret = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut secret)?;
        // A name of its own per call: threads of one process storing their
        // first entries at once each make a secret, and with one name per
        // process one thread's removal of the file left another's link
        // without its source (its store failed).
        let tmp = self.tmp_path("secret");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&secret)?;
        file.sync_all()?;
        // A link does not replace a key another process made meanwhile:
        // everyone ends up with the first one.
        let linked = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(secret),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(&path),
            Err(e) => Err(e),
        }
    }

    /// The entries, sorted by key. A missing folder has none.
    pub fn list(&self) -> std::io::Result<Vec<CacheEntry>> {
        let read = match std::fs::read_dir(&self.dir) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(e),
        };
        let mut res = vec![];
        for item in read {
            let item = item?;
            let path = item.path();
            let Some(key) = entry_key(&path) else {
                continue;
            };
            let meta = match item.metadata() {
                Ok(meta) => meta,
                // Removed since the folder was read (another process's
                // eviction or clear).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            res.push(CacheEntry {
                key,
                path,
                size: meta.len(),
                modified: meta.modified().ok(),
            });
        }
        res.sort_by_key(|e| e.key.0);
        Ok(res)
    }

    /// Removes every entry and leftover temporary file; returns the entries
    /// removed.
    pub fn clear(&self) -> std::io::Result<Vec<CacheEntry>> {
        let entries = self.list()?;
        for e in &entries {
            match std::fs::remove_file(&e.path) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
                _ => {}
            }
        }
        if let Ok(read) = std::fs::read_dir(&self.dir) {
            for item in read.flatten() {
                let name = item.file_name();
                let name = name.to_string_lossy();
                if name.starts_with('.') && name.ends_with(".tmp") {
                    let _ = std::fs::remove_file(item.path());
                }
            }
        }
        Ok(entries)
    }
}

/// The executable stored under `key`, loaded by `client`; `None` when there
/// is none or it is unusable (logged as a warning: the caller recompiles and
/// the store replaces it).
pub(crate) fn load(
    cache: &ExecutableCache,
    key: CacheKey,
    client: &Client,
    program: &Program,
) -> Option<LoadedExecutable> {
    let path = cache.path(key);
    let bytes = match cache.load(key) {
        Ok(Some(Ok(bytes))) => bytes,
        Ok(None) => return None,
        Ok(Some(Err(e))) => {
            tracing::warn!(
                "executable cache entry {} is unusable ({e}); recompiling",
                path.display()
            );
            return None;
        }
        Err(e) => {
            tracing::warn!(
                "cannot read executable cache entry {}: {e}; recompiling",
                path.display()
            );
            return None;
        }
    };
    // The plugin may crash on an entry it cannot read, where no header
    // check reaches. A marker names the loading process while the plugin
    // reads the entry; a marker whose process is gone means a load crashed,
    // and the entry is removed instead of crashing every later run.
    let marker = cache.loading_marker(key);
    if let Ok(text) = std::fs::read_to_string(&marker) {
        let live = text.trim().parse::<u32>().is_ok_and(|pid| {
            pid != std::process::id() && Path::new(&format!("/proc/{pid}")).exists()
        });
        if !live {
            tracing::warn!(
                "executable cache entry {} crashed an earlier load; removing it and recompiling",
                path.display()
            );
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(&marker);
            return None;
        }
    }
    // Written whole, then renamed into place: a reader never sees an empty
    // marker, which it would take for a crashed load of a good entry.
    let pid = std::process::id();
    let staged = cache.dir.join(format!(".{key}.loading.{pid}.tmp"));
    let marked = std::fs::write(&staged, pid.to_string())
        .and_then(|()| std::fs::rename(&staged, &marker))
        .is_ok();
    if !marked {
        let _ = std::fs::remove_file(&staged);
    }
    let loaded = client.deserialize_and_load(&bytes);
    if marked {
        let _ = std::fs::remove_file(&marker);
    }
    match loaded.map_err(|e| e.to_string()).and_then(|exe| {
        matches_program(&exe, program)?;
        Ok(exe)
    }) {
        Ok(exe) => Some(exe),
        Err(e) => {
            tracing::warn!(
                "executable cache entry {} does not load ({e}); recompiling",
                path.display()
            );
            None
        }
    }
}

/// Checks a loaded executable against the program it is to run: as many
/// outputs and parameters, and (unpartitioned, where the plugin tells) the
/// parameters' types and dimensions. An entry stored under a colliding key,
/// or damaged where the plugin's own checks do not look, fails here instead
/// of at the first call.
fn matches_program(exe: &LoadedExecutable, program: &Program) -> Result<(), String> {
    let (args, results) = (program.args(), program.results());
    if exe.num_outputs() != results.len() {
        return Err(format!(
            "it has {} outputs, the program {}",
            exe.num_outputs(),
            results.len()
        ));
    }
    if let Some(n) = exe.num_parameters()
        && n != args.len()
    {
        return Err(format!("it has {n} parameters, the program {}", args.len()));
    }
    if exe.num_partitions() * exe.num_replicas() > 1 {
        // Per-device parameters are shards: their dimensions differ.
        return Ok(());
    }
    for (i, arg) in args.iter().enumerate() {
        let Some((ty, dims)) = exe.parameter_shape(i) else {
            continue;
        };
        let want = crate::dtype::element_type(arg.shape.dtype());
        if ty.is_some_and(|t| t != want) || dims != arg.shape.dims() {
            return Err(format!(
                "its parameter {i} is {ty:?}{dims:?}, the program's {} is {}",
                arg.path, arg.shape
            ));
        }
    }
    Ok(())
}

/// Serializes `exe` (compiled in this process) into the cache under `key`;
/// a failure is logged, not returned.
pub(crate) fn store(cache: &ExecutableCache, key: CacheKey, exe: &LoadedExecutable) {
    let res = exe
        .serialize()
        .map_err(|e| e.to_string())
        .and_then(|bytes| cache.store(key, &bytes).map_err(|e| e.to_string()));
    if let Err(e) = res {
        tracing::warn!(
            "cannot store executable {key} in {}: {e}",
            cache.dir().display()
        );
    }
}

/// The size budget that `RADIX_CACHE_MAX_BYTES`'s `value` sets: a number
/// of bytes (0: unlimited); unset, [`DEFAULT_MAX_BYTES`]; not a number, the
/// default and a warning.
fn max_bytes_from(value: Option<&str>) -> u64 {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return DEFAULT_MAX_BYTES;
    };
    value.parse().unwrap_or_else(|_| {
        tracing::warn!(
            "{MAX_BYTES_VAR}={value:?} is not a number of bytes; using {DEFAULT_MAX_BYTES}"
        );
        DEFAULT_MAX_BYTES
    })
}

/// Sets `path`'s modification time to now (the entry was used); a failure
/// only makes it an earlier candidate for eviction.
fn touch(path: &Path) {
    let res = std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(SystemTime::now()));
    if let Err(e) = res {
        tracing::debug!("cannot touch {}: {e}", path.display());
    }
}

/// The key in an entry's file name `<16 hex digits>.pjrt`.
fn entry_key(path: &Path) -> Option<CacheKey> {
    if path.extension()? != EXTENSION {
        return None;
    }
    let stem = path.file_stem()?.to_str()?;
    if stem.len() != 16 {
        return None;
    }
    u64::from_str_radix(stem, 16).ok().map(CacheKey)
}

/// Where the code starts in the header: what comes before it is covered.
const CODE_AT: usize = 28;

fn encode(secret: &[u8; 32], key: CacheKey, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&key.0.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let code = hmac_sha256(secret, &[&out[..CODE_AT], payload]);
    out.extend_from_slice(&code);
    out.extend_from_slice(payload);
    out
}

/// HMAC-SHA256 (RFC 2104) of the concatenated `parts` under a 32-byte key.
fn hmac_sha256(secret: &[u8; 32], parts: &[&[u8]]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let pad = |byte: u8| {
        let mut block = [byte; 64];
        block.iter_mut().zip(secret).for_each(|(b, s)| *b ^= s);
        block
    };
    let mut inner = Sha256::new();
    inner.update(pad(0x36));
    parts.iter().for_each(|p| inner.update(p));
    let mut outer = Sha256::new();
    outer.update(pad(0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

fn decode(
    secret: &[u8; 32],
    key: CacheKey,
    mut bytes: Vec<u8>,
) -> std::result::Result<Vec<u8>, EntryError> {
    let u64_at = |b: &[u8], at: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(a)
    };
    if bytes.len() < HEADER {
        if bytes.len() < 12 || &bytes[..8] != MAGIC {
            return Err(EntryError::Foreign);
        }
        return Err(EntryError::Truncated {
            expected: HEADER as u64,
            got: bytes.len() as u64,
        });
    }
    if &bytes[..8] != MAGIC || bytes[8..12] != VERSION.to_le_bytes() {
        return Err(EntryError::Foreign);
    }
    let found = u64_at(&bytes, 12);
    if found != key.0 {
        return Err(EntryError::OtherKey { found });
    }
    let len = u64_at(&bytes, 20);
    let expected = HEADER as u64 + len;
    if bytes.len() as u64 != expected {
        return Err(EntryError::Truncated {
            expected,
            got: bytes.len() as u64,
        });
    }
    let code = hmac_sha256(secret, &[&bytes[..CODE_AT], &bytes[HEADER..]]);
    if bytes[CODE_AT..HEADER] != code {
        return Err(EntryError::Corrupt);
    }
    bytes.drain(..HEADER);
    Ok(bytes)
}

/// A folder check of radix-fetch's as an I/O error (loads and stores of
/// entries report I/O errors): the executables in a folder another user
/// could write are machine code that user chose.
fn untrusted_as_io<E: std::fmt::Display>(res: Result<(), E>) -> std::io::Result<()> {
    res.map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_reject_damage() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ExecutableCache::new(dir.path());
        let key = CacheKey::from_parts("module", b"opts", "sha", (0, 1), "host");
        assert!(cache.load(key).unwrap().is_none());
        let path = cache.store(key, b"payload").unwrap();
        assert_eq!(cache.load(key).unwrap().unwrap().unwrap(), b"payload");
        let listed = cache.list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].key, key);
        assert_eq!(listed[0].size, (HEADER + 7) as u64);

        let full = std::fs::read(&path).unwrap();
        let damaged = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            cache.load(key).unwrap().unwrap().unwrap_err()
        };
        assert!(matches!(
            damaged(&full[..full.len() - 1]),
            EntryError::Truncated { .. }
        ));
        assert!(matches!(damaged(&full[..20]), EntryError::Truncated { .. }));
        assert_eq!(damaged(b"garbage from elsewhere"), EntryError::Foreign);
        assert_eq!(damaged(b""), EntryError::Foreign);
        let mut flipped = full.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(damaged(&flipped), EntryError::Corrupt);
        // Stored under another cache folder's secret: as good as changed.
        let elsewhere = encode(&[7; 32], key, b"payload");
        assert_eq!(damaged(&elsewhere), EntryError::Corrupt);
        let other = CacheKey::from_parts("other", b"opts", "sha", (0, 1), "host");
        std::fs::write(&path, encode(&cache.secret().unwrap(), other, b"payload")).unwrap();
        assert_eq!(
            cache.load(key).unwrap().unwrap().unwrap_err(),
            EntryError::OtherKey { found: other.0 }
        );

        std::fs::write(dir.path().join(".x.tmp"), b"").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"").unwrap();
        assert_eq!(cache.clear().unwrap().len(), 1);
        assert!(cache.list().unwrap().is_empty());
        assert!(dir.path().join("notes.txt").exists());
        assert!(!dir.path().join(".x.tmp").exists());
    }

    #[test]
    fn the_budget_comes_from_the_variable() {
        assert_eq!(max_bytes_from(None), DEFAULT_MAX_BYTES);
        assert_eq!(max_bytes_from(Some("")), DEFAULT_MAX_BYTES);
        assert_eq!(max_bytes_from(Some("0")), 0);
        assert_eq!(max_bytes_from(Some(" 1048576 ")), 1 << 20);
        assert_eq!(max_bytes_from(Some("2G")), DEFAULT_MAX_BYTES);
        assert_eq!(max_bytes_from(Some("-1")), DEFAULT_MAX_BYTES);
    }

    #[test]
    fn every_part_changes_the_key() {
        let base = CacheKey::from_parts("m", b"o", "s", (0, 1), "host");
        assert_eq!(base, CacheKey::from_parts("m", b"o", "s", (0, 1), "host"));
        for other in [
            CacheKey::from_parts("m2", b"o", "s", (0, 1), "host"),
            CacheKey::from_parts("m", b"o2", "s", (0, 1), "host"),
            CacheKey::from_parts("m", b"o", "s2", (0, 1), "host"),
            CacheKey::from_parts("m", b"o", "s", (0, 2), "host"),
            CacheKey::from_parts("mo", b"", "s", (0, 1), "host"),
            CacheKey::from_parts("m", b"o", "s", (0, 1), "host2"),
        ] {
            assert_ne!(base, other);
        }
        assert_eq!(base.to_string().len(), 16);
    }

    #[test]
    fn the_host_fingerprint_holds_xla_flags_and_cpu_features() {
        let f = host_fingerprint();
        let flags = std::env::var("XLA_FLAGS").unwrap_or_default();
        assert!(f.starts_with(&format!("XLA_FLAGS={flags};cpu=")), "{f}");
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            f.contains("avx512f"),
            std::arch::is_x86_feature_detected!("avx512f"),
            "{f}"
        );
    }
}
