//! The committed C header must be exactly what cbindgen generates from the
//! current source. Regenerate it with:
//!
//! ```sh
//! TICKWHEEL_BLESS=1 cargo test --test header
//! ```
#![cfg(not(any(loom, miri)))]

use std::path::Path;

const REGENERATE: &str = "TICKWHEEL_BLESS=1 cargo test --test header";

fn generate() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(root.join("src/lib.rs"))
        .generate()
        .expect("cbindgen generates the header");
    let mut bytes = Vec::new();
    bindings.write(&mut bytes);
    String::from_utf8(bytes).expect("the header is UTF-8")
}

#[test]
fn committed_header_is_up_to_date() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("include/tickwheel.h");
    let generated = generate();
    // Written to a temporary file as well, so a failure can be diffed.
    let fresh = std::env::temp_dir().join(format!("tickwheel-{}.h", std::process::id()));
    std::fs::write(&fresh, &generated).expect("write the fresh header");
    if std::env::var_os("TICKWHEEL_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).expect("write include/tickwheel.h");
        let _ = std::fs::remove_file(&fresh);
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        panic!(
            "include/tickwheel.h is out of date with src/ffi/.\n\
             Fresh header: {}\n\
             See the difference: diff -u include/tickwheel.h {}\n\
             Regenerate it with: {REGENERATE}",
            fresh.display(),
            fresh.display()
        );
    }
    let _ = std::fs::remove_file(&fresh);
    // Every exported function appears in the header.
    for name in [
        "tw_service_new",
        "tw_timer_stop",
        "tw_shard_poll",
        "tw_wheel_advance",
        "tw_result_str",
        "tw_version",
    ] {
        assert!(committed.contains(name), "{name} missing from the header");
    }
}

/// The version macros C programs compile against are Cargo.toml's version.
#[test]
fn header_version_macros_are_the_package_version() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header =
        std::fs::read_to_string(root.join("include/tickwheel.h")).expect("read the header");
    let define = |name: &str| -> String {
        let prefix = format!("#define {name} ");
        header
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("{name} not defined in include/tickwheel.h"))
            .trim()
            .to_owned()
    };
    assert_eq!(
        define("TICKWHEEL_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MAJOR")
    );
    assert_eq!(
        define("TICKWHEEL_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_MINOR")
    );
    assert_eq!(
        define("TICKWHEEL_VERSION_PATCH"),
        env!("CARGO_PKG_VERSION_PATCH")
    );
}
