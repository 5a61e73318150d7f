//! Which machines a pinned wheel is for, and the pip options that fetch that
//! wheel and no other.
//!
//! A wheel's file name ends in its compatibility tag, `python-abi-platform`
//! (`py3-none-manylinux_2_27_x86_64`, `py3-none-any`; each part may list
//! alternatives joined by dots). A [`crate::Package`] pins one wheel by its
//! tag and sha256: pip is told that tag's platform, implementation and ABI
//! (so it cannot pick another platform's file, nor an sdist), and a machine
//! the tag does not fit is told so before pip runs.

use crate::{Error, Result};

/// A wheel's compatibility tag, read from `python-abi-platform`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelTag {
    python: Vec<String>,
    abi: Vec<String>,
    platform: Vec<String>,
}

impl WheelTag {
    /// Reads `tag` (`py3-none-any`, `cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64`).
    pub fn parse(tag: &str) -> Result<WheelTag> {
        let parts: Vec<&str> = tag.split('-').collect();
        let [python, abi, platform] = parts[..] else {
            return Err(Error::Tag {
                tag: tag.to_string(),
                reason: "not python-abi-platform".into(),
            });
        };
        let alternatives = |s: &str| -> Result<Vec<String>> {
            let v: Vec<String> = s.split('.').map(str::to_string).collect();
            if v.iter()
                .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            {
                return Err(Error::Tag {
                    tag: tag.to_string(),
                    reason: format!("bad part {s:?}"),
                });
            }
            Ok(v)
        };
        let python = alternatives(python)?;
        if let Some(p) = python
            .iter()
            .find(|p| !(p.starts_with("py") || p.starts_with("cp")))
        {
            return Err(Error::Tag {
                tag: tag.to_string(),
                reason: format!("python tag {p} is neither py* nor cp*"),
            });
        }
        Ok(WheelTag {
            python,
            abi: alternatives(abi)?,
            platform: alternatives(platform)?,
        })
    }

    /// The options that make `pip download` take this wheel only: binary
    /// wheels only, and the tag's implementation, Python version (when the
    /// tag names a minor version), ABIs and platforms.
    pub fn pip_args(&self) -> Vec<String> {
        let mut args = vec!["--only-binary=:all:".to_string()];
        // `py3` and `cp311` alike: the newest alternative decides.
        let python = self.python.last().expect("a parsed tag has a python part");
        let (implementation, version) = python.split_at(2);
        args.extend(["--implementation".into(), implementation.to_string()]);
        // `py3` fits any Python 3, which pip checks against the running one;
        // `cp311` is 3.11 only.
        if version.len() > 1 {
            args.extend(["--python-version".into(), version.to_string()]);
        }
        for abi in &self.abi {
            args.extend(["--abi".into(), abi.clone()]);
        }
        for platform in &self.platform {
            args.extend(["--platform".into(), platform.clone()]);
        }
        args
    }

    /// The platforms, as the tag writes them (`manylinux_2_27_x86_64`).
    pub fn platforms(&self) -> String {
        self.platform.join(".")
    }

    /// Whether a wheel of this tag runs on `machine`.
    pub fn fits(&self, machine: &Machine) -> bool {
        self.platform.iter().any(|p| platform_fits(p, machine))
    }
}

/// What decides which wheels a machine can use: the operating system and
/// CPU as Rust names them (`linux`, `x86_64`), and on Linux the C library's
/// version (`None` for a libc other than glibc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// `std::env::consts::OS`.
    pub os: &'static str,
    /// `std::env::consts::ARCH`.
    pub arch: &'static str,
    /// glibc's major and minor version, on a glibc system.
    pub glibc: Option<(u32, u32)>,
}

impl Machine {
    /// This machine.
    pub fn this() -> Machine {
        Machine {
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
            glibc: glibc_version(),
        }
    }
}

impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.os, self.arch)?;
        match self.glibc {
            Some((major, minor)) => write!(f, " (glibc {major}.{minor})"),
            None if self.os == "linux" => write!(f, " (not glibc)"),
            None => Ok(()),
        }
    }
}

/// Whether one platform tag fits `m`: `any`; `manylinux_X_Y_ARCH` (and
/// the legacy `manylinux1`, `manylinux2010`, `manylinux2014`) on a glibc
/// Linux of at least X.Y; `musllinux_*` on a Linux without glibc;
/// `linux_ARCH`; `macosx_*_ARCH` (`universal2` for both CPUs); `win_amd64`
/// and `win_arm64`.
fn platform_fits(tag: &str, m: &Machine) -> bool {
    if tag == "any" {
        return true;
    }
    let arch_is = |a: &str| match a {
        "x86_64" | "amd64" => m.arch == "x86_64",
        "aarch64" | "arm64" => m.arch == "aarch64",
        "universal2" => matches!(m.arch, "x86_64" | "aarch64"),
        other => m.arch == other,
    };
    let glibc_at_least = |need: (u32, u32)| m.glibc.is_some_and(|have| have >= need);
    let legacy = [
        ("manylinux1_", (2, 5)),
        ("manylinux2010_", (2, 12)),
        ("manylinux2014_", (2, 17)),
    ];
    if m.os == "linux" {
        for (prefix, need) in legacy {
            if let Some(arch) = tag.strip_prefix(prefix) {
                return glibc_at_least(need) && arch_is(arch);
            }
        }
        if let Some(rest) = tag.strip_prefix("manylinux_") {
            let mut it = rest.splitn(3, '_');
            let (Some(major), Some(minor), Some(arch)) = (it.next(), it.next(), it.next()) else {
                return false;
            };
            let (Ok(major), Ok(minor)) = (major.parse(), minor.parse()) else {
                return false;
            };
            return glibc_at_least((major, minor)) && arch_is(arch);
        }
        if let Some(rest) = tag.strip_prefix("musllinux_") {
            let arch = rest.splitn(3, '_').nth(2).unwrap_or("");
            return m.glibc.is_none() && arch_is(arch);
        }
        if let Some(arch) = tag.strip_prefix("linux_") {
            return arch_is(arch);
        }
    }
    if m.os == "macos"
        && let Some(rest) = tag.strip_prefix("macosx_")
    {
        return arch_is(rest.splitn(3, '_').nth(2).unwrap_or(""));
    }
    if m.os == "windows"
        && let Some(arch) = tag.strip_prefix("win_")
    {
        return arch_is(arch);
    }
    false
}

/// glibc's version, read from the library itself.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn glibc_version() -> Option<(u32, u32)> {
    // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
    let v = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    let mut parts = v.to_str().ok()?.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn glibc_version() -> Option<(u32, u32)> {
    None
}
