//! The library's version, for C programs: compile-time macros in the header
//! and `tw_version()` for the library actually loaded at run time.
//!
//! A program compares the two to notice that it was built against one
//! header and runs against another library (a shared library upgraded
//! underneath it). The numbers are literals because cbindgen copies a
//! constant's literal into a `#define`; the tests below tie them to
//! `Cargo.toml`'s version, so a version bump that forgets them fails.

use std::ffi::{c_char, CStr};

/// The major version of the header (`Cargo.toml`'s version, first number).
pub const TICKWHEEL_VERSION_MAJOR: u32 = 0;
/// The minor version of the header.
pub const TICKWHEEL_VERSION_MINOR: u32 = 1;
/// The patch version of the header.
pub const TICKWHEEL_VERSION_PATCH: u32 = 0;

/// `CARGO_PKG_VERSION` with a terminating NUL, made at compile time.
const VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(version) => version,
        Err(_) => panic!("the package version contains a NUL byte"),
    };

/// The version of the loaded library as a static NUL-terminated string,
/// `"MAJOR.MINOR.PATCH"` (with a `-pre` suffix for a pre-release), the same
/// as the package version. Never returns NULL; the string lives for the
/// whole program.
///
/// Compare it with the header's `TICKWHEEL_VERSION_MAJOR`, `_MINOR` and
/// `_PATCH` to check that a shared library matches the header a program was
/// built with.
///
/// Thread safety: may be called from any thread.
#[no_mangle]
pub extern "C" fn tw_version() -> *const c_char {
    VERSION.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(name: &str) -> u32 {
        name.parse().expect("Cargo sets a numeric version part")
    }

    #[test]
    fn macros_match_cargo_toml() {
        assert_eq!(
            TICKWHEEL_VERSION_MAJOR,
            number(env!("CARGO_PKG_VERSION_MAJOR"))
        );
        assert_eq!(
            TICKWHEEL_VERSION_MINOR,
            number(env!("CARGO_PKG_VERSION_MINOR"))
        );
        assert_eq!(
            TICKWHEEL_VERSION_PATCH,
            number(env!("CARGO_PKG_VERSION_PATCH"))
        );
    }

    #[test]
    fn tw_version_is_the_package_version() {
        // SAFETY: tw_version returns a static NUL-terminated string.
        let version = unsafe { CStr::from_ptr(tw_version()) };
        assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
        let expected = format!(
            "{TICKWHEEL_VERSION_MAJOR}.{TICKWHEEL_VERSION_MINOR}.{TICKWHEEL_VERSION_PATCH}"
        );
        assert!(version.to_str().unwrap().starts_with(&expected));
    }
}
