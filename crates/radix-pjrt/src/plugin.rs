//! A loaded PJRT plugin: the shared library, its `PJRT_Api` table, its
//! attributes, and the conversion of `PJRT_Error`s into [`Error`]s.
//!
//! Plugins are never unloaded: `dlclose` of an XLA plugin is unsafe (worker
//! threads, static destructors), and a second `dlopen` of the same file returns
//! the same library, whose `PJRT_Plugin_Initialize` must not run twice. So
//! [`Plugin::load`] keeps every plugin in a process-wide list and returns the
//! same [`Arc`] for the same file. Handles still hold an `Arc<Plugin>`.

use std::ffi::c_char;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::ffi;
use crate::named_value::{NamedValue, Value};
use crate::{Error, Result};

/// The PJRT major version radix speaks (the header's `PJRT_API_MAJOR`).
pub const PJRT_API_MAJOR: i32 = 0;
/// The PJRT minor version of the header radix was written against.
pub const PJRT_API_MINOR: i32 = 81;

/// A PJRT plugin loaded into this process.
pub struct Plugin {
    api: ffi::PJRT_Api,
    path: PathBuf,
    attributes: Vec<NamedValue>,
    sha256: OnceLock<String>,
    _library: libloading::Library,
}

// SAFETY: the table holds function pointers and a pointer to the plugin's
// static extension chain; PJRT functions may be called from any thread.
unsafe impl Send for Plugin {}
// SAFETY: as above; `Plugin` has no interior mutability besides `OnceLock`.
unsafe impl Sync for Plugin {}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (major, minor) = self.api_version();
        f.debug_struct("Plugin")
            .field("path", &self.path)
            .field("api_version", &format_args!("{major}.{minor}"))
            .finish_non_exhaustive()
    }
}

/// Plugins loaded so far, by canonical path.
static LOADED: Mutex<Vec<(PathBuf, Arc<Plugin>)>> = Mutex::new(Vec::new());

impl Plugin {
    /// Loads the PJRT plugin at `path` (or returns the one already loaded from
    /// that file), checks its API major version and initializes it.
    ///
    /// A missing, truncated or corrupt file, or a library without
    /// `GetPjrtApi`, is an [`Error::PluginLoad`] naming the path.
    pub fn load(path: &Path) -> Result<Arc<Plugin>> {
        let load_err = |reason: String| Error::PluginLoad {
            path: path.to_path_buf(),
            reason,
        };
        let canonical = path.canonicalize().map_err(|e| load_err(e.to_string()))?;
        let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = loaded.iter().find(|(p, _)| *p == canonical) {
            return Ok(p.clone());
        }
        check_elf(&canonical).map_err(load_err)?;
        // SAFETY: loading a library runs its initializers; the file is a
        // well-formed shared object for this machine (checked above), and a
        // PJRT plugin's initializers only set up its own state.
        let library =
            unsafe { libloading::Library::new(&canonical) }.map_err(|e| load_err(e.to_string()))?;
        // SAFETY: `GetPjrtApi` has this signature in every PJRT plugin.
        let get_api = unsafe { library.get::<ffi::GetPjrtApiFn>(b"GetPjrtApi\0") }
            .map_err(|e| load_err(format!("no GetPjrtApi symbol: {e}")))?;
        // SAFETY: calling the plugin's entry point, which takes no arguments.
        let raw = unsafe { get_api() };
        if raw.is_null() {
            return Err(load_err("GetPjrtApi returned null".into()));
        }
        // SAFETY: `raw` points to the plugin's static table; its first field
        // says how many bytes of it exist. Copy at most our size into a zeroed
        // table, so entries the plugin lacks read as `None`.
        let api = unsafe {
            let theirs = (*raw).struct_size;
            if theirs < std::mem::offset_of!(ffi::PJRT_Api, PJRT_Error_Destroy) {
                return Err(load_err(format!(
                    "PJRT_Api struct_size {theirs} is too small"
                )));
            }
            let mut api: ffi::PJRT_Api = std::mem::zeroed();
            let n = theirs.min(std::mem::size_of::<ffi::PJRT_Api>());
            std::ptr::copy_nonoverlapping(raw.cast::<u8>(), (&raw mut api).cast::<u8>(), n);
            api
        };
        let mut plugin = Plugin {
            api,
            path: canonical.clone(),
            attributes: Vec::new(),
            sha256: OnceLock::new(),
            _library: library,
        };
        let (major, minor) = plugin.api_version();
        if major != PJRT_API_MAJOR {
            return Err(load_err(format!(
                "PJRT API {major}.{minor}, radix needs major version {PJRT_API_MAJOR}"
            )));
        }
        if plugin.api.PJRT_Error_Destroy.is_none()
            || plugin.api.PJRT_Error_Message.is_none()
            || plugin.api.PJRT_Error_GetCode.is_none()
        {
            return Err(load_err("PJRT_Api lacks the error functions".into()));
        }
        let mut init = ffi::PJRT_Plugin_Initialize_Args::new();
        // SAFETY: valid args struct.
        unsafe { call!(&plugin, PJRT_Plugin_Initialize, &mut init) }
            .map_err(|e| load_err(e.to_string()))?;
        let mut attrs = ffi::PJRT_Plugin_Attributes_Args::new();
        // SAFETY: valid args struct; the returned array lives as long as the process.
        unsafe { call!(&plugin, PJRT_Plugin_Attributes, &mut attrs) }
            .map_err(|e| load_err(e.to_string()))?;
        // SAFETY: the plugin returned `num_attributes` valid named values.
        plugin.attributes = unsafe { NamedValue::read_all(attrs.attributes, attrs.num_attributes) };
        tracing::debug!(path = %canonical.display(), major, minor, "loaded PJRT plugin");
        let plugin = Arc::new(plugin);
        loaded.push((canonical, plugin.clone()));
        Ok(plugin)
    }

    /// The plugin file (canonicalized).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Asks the kernel to take back the resident pages of the plugin's
    /// file mapped without write access (its machine code and read-only
    /// data), `MADV_PAGEOUT`; gives the bytes advised. Most of what a
    /// start touched there is XLA's compiler, which a server's steps never
    /// run again; the pages stay in the page cache, and what runs later
    /// (a step, a compile) faults them back in. Nothing changes but where
    /// the pages live. Linux only (elsewhere `Ok(0)`).
    pub fn page_out_code(&self) -> std::io::Result<usize> {
        #[cfg(target_os = "linux")]
        {
            let maps = std::fs::read_to_string("/proc/self/maps")?;
            let mut advised = 0;
            for line in maps.lines() {
                let mut fields = line.split_whitespace();
                let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
                    continue;
                };
                // offset, device, inode, then the path (which has no spaces
                // in radix's cache).
                let path = fields.nth(3).map(Path::new);
                if path != Some(self.path.as_path()) || perms.contains('w') {
                    continue;
                }
                let Some((lo, hi)) = range.split_once('-') else {
                    continue;
                };
                let parse = |h: &str| usize::from_str_radix(h, 16).ok();
                let (Some(lo), Some(hi)) = (parse(lo), parse(hi)) else {
                    continue;
                };
                // SAFETY: a hint on pages of a mapping of this process; no
                // content changes (file pages are read back on access).
                if unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_PAGEOUT) }
                    != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                advised += hi - lo;
            }
            Ok(advised)
        }
        #[cfg(not(target_os = "linux"))]
        Ok(0)
    }

    /// The PJRT API version the plugin was built with, `(major, minor)`.
    pub fn api_version(&self) -> (i32, i32) {
        let v = &self.api.pjrt_api_version;
        (v.major_version, v.minor_version)
    }

    /// All attributes the plugin reports (`xla_version`,
    /// `stablehlo_current_version`, ...).
    pub fn attributes(&self) -> &[NamedValue] {
        &self.attributes
    }

    /// The attribute named `name`.
    pub fn attribute(&self, name: &str) -> Option<&Value> {
        self.attributes
            .iter()
            .find(|a| a.name == name)
            .map(|a| &a.value)
    }

    /// The newest StableHLO version the plugin reads, e.g. `[1, 20, 0]`.
    pub fn stablehlo_current_version(&self) -> Option<&[i64]> {
        self.int64_list("stablehlo_current_version")
    }

    /// The oldest StableHLO version the plugin reads.
    pub fn stablehlo_minimum_version(&self) -> Option<&[i64]> {
        self.int64_list("stablehlo_minimum_version")
    }

    /// The hex sha256 of the plugin file, computed on first use (or
    /// remembered from an earlier process, see `file_hash.rs`). Compiled
    /// executables only load into the plugin build that made them, so caches
    /// key on this.
    pub fn sha256(&self) -> Result<&str> {
        if let Some(s) = self.sha256.get() {
            return Ok(s);
        }
        let digest = crate::file_hash::sha256(&self.path)?;
        Ok(self.sha256.get_or_init(|| digest))
    }

    fn int64_list(&self, name: &str) -> Option<&[i64]> {
        match self.attribute(name)? {
            Value::Int64List(v) => Some(v),
            _ => None,
        }
    }

    /// The function table.
    #[inline]
    pub(crate) fn api(&self) -> &ffi::PJRT_Api {
        &self.api
    }

    /// Turns a PJRT error (or null) into a `Result`, freeing the error.
    ///
    /// # Safety
    /// `err` is null or a live error returned by this plugin.
    #[inline]
    pub(crate) unsafe fn check(&self, call: &'static str, err: *mut ffi::PJRT_Error) -> Result<()> {
        if err.is_null() {
            Ok(())
        } else {
            // SAFETY: forwarded from the caller.
            Err(unsafe { self.take_error(call, err) })
        }
    }

    #[cold]
    unsafe fn take_error(&self, call: &'static str, err: *mut ffi::PJRT_Error) -> Error {
        let mut msg = ffi::PJRT_Error_Message_Args::new();
        msg.error = err;
        let mut code = ffi::PJRT_Error_GetCode_Args::new();
        code.error = err;
        let mut destroy = ffi::PJRT_Error_Destroy_Args::new();
        destroy.error = err;
        // SAFETY: `load` checked these three entries exist; `err` is live until
        // destroyed, and the message is copied before that.
        unsafe {
            (self.api.PJRT_Error_Message.expect("checked at load"))(&mut msg);
            let message = lossy(msg.message, msg.message_size);
            let get_code_err = (self.api.PJRT_Error_GetCode.expect("checked at load"))(&mut code);
            let code_name = if get_code_err.is_null() {
                error_code_name(code.code)
            } else {
                "UNKNOWN"
            };
            (self.api.PJRT_Error_Destroy.expect("checked at load"))(&mut destroy);
            Error::Pjrt {
                call,
                code: code_name,
                message,
            }
        }
    }

    /// The error for an entry point the plugin does not provide.
    #[cold]
    pub(crate) fn missing(&self, call: &'static str) -> Error {
        let (major, minor) = self.api_version();
        Error::Pjrt {
            call,
            code: "UNIMPLEMENTED",
            message: format!("the plugin (PJRT API {major}.{minor}) does not provide {call}"),
        }
    }
}

/// Copies a (pointer, length) C string, replacing invalid UTF-8.
///
/// # Safety
/// `ptr` is null or points to `len` readable bytes.
pub(crate) unsafe fn lossy(ptr: *const c_char, len: usize) -> String {
    if ptr.is_null() || len == 0 {
        return String::new();
    }
    // SAFETY: forwarded from the caller.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    String::from_utf8_lossy(bytes).into_owned()
}

/// The name of a `PJRT_Error_Code`.
pub(crate) fn error_code_name(code: ffi::PJRT_Error_Code) -> &'static str {
    match code {
        0 => "OK",
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        15 => "DATA_LOSS",
        16 => "UNAUTHENTICATED",
        _ => "UNKNOWN",
    }
}

/// Checks that `path` is a complete ELF shared object for this machine before
/// `dlopen` sees it: a truncated library maps segments past the end of the
/// file, and touching them kills the process with SIGBUS.
#[cfg(target_os = "linux")]
fn check_elf(path: &Path) -> std::result::Result<(), String> {
    use std::io::{Seek, SeekFrom};

    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let mut header = [0u8; 64];
    file.read_exact(&mut header)
        .map_err(|_| format!("not an ELF file ({len} bytes)"))?;
    if &header[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if header[4] != 2 || header[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    const ET_DYN: u16 = 3;
    if u16_at(&header, 16) != ET_DYN {
        return Err("not an ELF shared object".into());
    }
    #[cfg(target_arch = "x86_64")]
    const MACHINE: Option<u16> = Some(62);
    #[cfg(target_arch = "aarch64")]
    const MACHINE: Option<u16> = Some(183);
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    const MACHINE: Option<u16> = None;
    if let Some(m) = MACHINE
        && u16_at(&header, 18) != m
    {
        return Err(format!(
            "ELF machine {} is not this machine's ({m})",
            u16_at(&header, 18)
        ));
    }
    let within = |off: u64, size: u64| off.checked_add(size).is_some_and(|end| end <= len);
    let (phoff, phentsize, phnum) = (
        u64_at(&header, 32),
        u16_at(&header, 54) as u64,
        u16_at(&header, 56) as u64,
    );
    let (shoff, shentsize, shnum) = (
        u64_at(&header, 40),
        u16_at(&header, 58) as u64,
        u16_at(&header, 60) as u64,
    );
    if phentsize < 56 || !within(phoff, phentsize * phnum) {
        return Err(format!(
            "truncated or corrupt ELF file ({len} bytes): program headers out of range"
        ));
    }
    if shoff != 0 && !within(shoff, shentsize * shnum) {
        return Err(format!(
            "truncated or corrupt ELF file ({len} bytes): section headers out of range"
        ));
    }
    let mut table = vec![0u8; (phentsize * phnum) as usize];
    file.seek(SeekFrom::Start(phoff))
        .map_err(|e| e.to_string())?;
    file.read_exact(&mut table).map_err(|e| e.to_string())?;
    for ph in table.chunks_exact(phentsize as usize) {
        const PT_LOAD: u32 = 1;
        const PT_DYNAMIC: u32 = 2;
        let kind = u32_at(ph, 0);
        if (kind == PT_LOAD || kind == PT_DYNAMIC) && !within(u64_at(ph, 8), u64_at(ph, 32)) {
            return Err(format!(
                "truncated or corrupt ELF file ({len} bytes): a segment lies past its end"
            ));
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn check_elf(_path: &Path) -> std::result::Result<(), String> {
    Ok(())
}
