//! Cache folders hold code radix runs: they are created private, and a
//! folder another user owns or can write is refused, packages in it
//! included.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use radix_fetch::{Error, Package, check_private, fetch_package, private_dir};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o777
}

#[test]
fn folders_are_created_private() {
    let tmp = tempfile::tempdir().unwrap();
    let deep = tmp.path().join("a/b/c");
    private_dir(&deep).unwrap();
    for dir in ["a", "a/b", "a/b/c"] {
        assert_eq!(mode(&tmp.path().join(dir)), 0o700, "{dir}");
    }
    // An existing private folder is accepted as it is.
    private_dir(&deep).unwrap();
}

#[test]
fn folders_others_can_write_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for m in [0o775, 0o757, 0o777] {
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(m)).unwrap();
        let err = check_private(tmp.path()).unwrap_err();
        assert!(matches!(err, Error::Untrusted { .. }), "{m:o}: {err}");
        assert!(
            err.to_string()
                .contains("writable by its group or by others"),
            "{err}"
        );
        assert!(private_dir(tmp.path()).is_err(), "{m:o}");
    }
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    check_private(tmp.path()).unwrap();
}

#[test]
fn folders_of_another_user_are_refused() {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let tmp = tempfile::tempdir().unwrap();
    let foreign = if me == 0 {
        // As root, give a folder away; otherwise `/` belongs to root.
        let c = std::ffi::CString::new(tmp.path().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path; chown has no other preconditions.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 12345, 12345) }, 0);
        tmp.path().to_path_buf()
    } else {
        "/".into()
    };
    let owner = std::fs::metadata(&foreign).unwrap().uid();
    assert_ne!(owner, me);
    let err = check_private(&foreign).unwrap_err();
    assert!(
        err.to_string().contains(&format!("owned by user {owner}")),
        "{err}"
    );
}

#[test]
fn a_package_in_a_folder_others_can_write_is_not_used() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = Package {
        name: "planted",
        version: "1.0",
        wheel_tag: "py3-none-any",
        wheel_sha256: "00",
    };
    // A package folder already in place, as another user could plant it
    // in a world-writable cache.
    let folder = tmp.path().join("packages/planted-1.0");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // SAFETY: this binary's only test that touches the environment.
    unsafe { std::env::set_var("RADIX_CACHE_DIR", tmp.path()) };
    let res = fetch_package(&pkg);
    unsafe { std::env::remove_var("RADIX_CACHE_DIR") };
    let err = res.unwrap_err();
    assert!(matches!(err, Error::Untrusted { .. }), "{err}");
    assert!(
        err.to_string().contains(&tmp.path().display().to_string()),
        "{err}"
    );
}
