//! Builds the C11 and C++17 tests in `ffi-tests/` against the static (and
//! shared) library, built on first use (see `library_dir`), with
//! `-Wall -Wextra -Wpedantic -Werror`, and runs them. The sanitizer and
//! valgrind runs of the same programs are in `ffi-tests/run.sh` (.ci/run).
//!
//! Needs the `capi` feature (Cargo.toml's `[[test]]` entry says so):
//! `cargo test --features capi`.
//!
//! The compilers are `gcc` and `g++`, or the programs that `TICKWHEEL_CC`
//! and `TICKWHEEL_CXX` name. Not `$CC` and `$CXX`: the programs and the
//! checks of compiler messages here are written for GCC, and a clang there
//! would fail them over clang's own warnings, not over tickwheel. Where a
//! compiler is missing, the tests that need it print that they were skipped
//! and pass, so that `cargo test` works on a machine without a C++ (or C)
//! compiler; with `TICKWHEEL_REQUIRE_COMPILERS=1` (CI sets it) they fail.
#![cfg(all(target_os = "linux", not(any(loom, miri))))]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Set to 1, a missing C or C++ compiler fails the tests that need it.
const REQUIRE: &str = "TICKWHEEL_REQUIRE_COMPILERS";

const C_FLAGS: &[&str] = &[
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Wpedantic",
    "-Werror",
    "-g",
    "-O1",
];
const CXX_FLAGS: &[&str] = &[
    "-std=c++17",
    "-Wall",
    "-Wextra",
    "-Wpedantic",
    "-Werror",
    "-g",
    "-O1",
];
/// What `rustc --print native-static-libs` lists for a static library on Linux.
const STATIC_LIBS: &[&str] = &["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl"];

/// A C or C++ compiler: the program to run.
struct Compiler(String);

impl Compiler {
    fn c() -> Option<Self> {
        Self::find("TICKWHEEL_CC", "gcc", "C")
    }

    fn cxx() -> Option<Self> {
        Self::find("TICKWHEEL_CXX", "g++", "C++")
    }

    /// The compiler `var` names (else `default`) if its `--version` runs.
    /// If not, says so on stderr and returns `None` (the caller skips its
    /// test), or panics under `TICKWHEEL_REQUIRE_COMPILERS=1`.
    fn find(var: &str, default: &str, language: &str) -> Option<Self> {
        let program = std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| default.to_owned());
        let found = Command::new(&program)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if found {
            return Some(Compiler(program));
        }
        let missing = format!(
            "no {language} compiler: `{program} --version` did not run \
             (install {default}, or name one in {var})"
        );
        if std::env::var_os(REQUIRE).is_some_and(|v| v == "1") {
            panic!("{missing}; {REQUIRE}=1 makes that a failure");
        }
        // Straight to stderr, in one write: the test harness captures
        // `eprintln!` of a passing test, and a skip nobody sees would pass
        // for a test that ran.
        // The harness names each test's thread after the test.
        let test = std::thread::current().name().unwrap_or("").to_owned();
        let line = format!("{test}: skipping its {language} programs: {missing}\n");
        let _ = std::io::stderr().write_all(line.as_bytes());
        None
    }

    fn command(&self) -> Command {
        Command::new(&self.0)
    }

    fn name(&self) -> &str {
        &self.0
    }
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding `libtickwheel.a` and `libtickwheel.so`, built once
/// per test run.
///
/// The package's `[lib]` has only the default crate type (Rust dependents
/// must not build C libraries), so this builds the two C libraries itself:
/// `cargo rustc --lib --features capi --crate-type staticlib,cdylib` into
/// `<target>/ffi`, a target directory of its own. Its own directory because
/// `cargo test` may still hold the lock on the main one, and so that the
/// `debug` rlib's build is not replaced by a build with other crate types.
/// Cargo's fingerprints make later runs a no-op; `ffi-tests/run.sh` uses the
/// same directory and features.
fn library_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        // <target>/<profile>/deps/ffi_c-<hash>
        let target = exe
            .ancestors()
            .nth(3)
            .expect("test binary in <target>/<profile>/deps")
            .join("ffi");
        let result = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["rustc", "--lib", "--features", "capi"])
            .args(["--crate-type", "staticlib,cdylib"])
            .env("CARGO_TARGET_DIR", &target)
            .current_dir(root())
            .output()
            .expect("run cargo rustc");
        assert!(
            result.status.success(),
            "cargo rustc --lib --features capi --crate-type staticlib,cdylib failed:\n{}",
            String::from_utf8_lossy(&result.stderr)
        );
        let dir = target.join("debug");
        for lib in ["libtickwheel.a", "libtickwheel.so"] {
            assert!(
                dir.join(lib).exists(),
                "{} not built",
                dir.join(lib).display()
            );
        }
        dir
    })
    .clone()
}

fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ffi-tests");
    std::fs::create_dir_all(&dir).expect("create the build directory");
    dir
}

/// Compiles one source file into `name`, linking `link` after it.
fn compile(
    compiler: &Compiler,
    flags: &[&str],
    source: &str,
    name: &str,
    link: &[String],
) -> PathBuf {
    let output = out_dir().join(name);
    let result = compiler
        .command()
        .args(flags)
        .arg("-I")
        .arg(root().join("include"))
        .arg("-o")
        .arg(&output)
        .arg(root().join("ffi-tests").join(source))
        .args(link)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", compiler.name()));
    assert!(
        result.status.success(),
        "{} {source} failed:\n{}",
        compiler.name(),
        String::from_utf8_lossy(&result.stderr)
    );
    output
}

fn static_link() -> Vec<String> {
    let mut link = vec![library_dir().join("libtickwheel.a").display().to_string()];
    link.extend(STATIC_LIBS.iter().map(|s| s.to_string()));
    link
}

/// Runs a program; it must exit 0 and print "passed".
fn run(program: &Path, args: &[&str]) -> String {
    let result = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    let stdout = String::from_utf8_lossy(&result.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        result.status.success(),
        "{} failed ({}):\n{stdout}\n{stderr}",
        program.display(),
        result.status
    );
    assert!(stdout.contains("passed"), "{stdout}");
    print!("{stdout}");
    stdout
}

#[test]
fn c_api() {
    let Some(cc) = Compiler::c() else { return };
    let program = compile(&cc, C_FLAGS, "test_c.c", "test_c", &static_link());
    run(&program, &[]);
}

#[test]
fn c_embedded_entries() {
    let Some(cc) = Compiler::c() else { return };
    let program = compile(&cc, C_FLAGS, "test_entry.c", "test_entry", &static_link());
    run(&program, &[]);
}

#[test]
fn c_api_through_the_shared_library() {
    let Some(cc) = Compiler::c() else { return };
    let dir = library_dir();
    assert!(dir.join("libtickwheel.so").exists(), "cdylib not built");
    // `--disable-new-dtags`: an RPATH (not a RUNPATH), which outranks the
    // LD_LIBRARY_PATH that `cargo test` sets (it names `target/debug`, where
    // an older checkout may have left a libtickwheel.so of its own).
    let link = vec![
        format!("-L{}", dir.display()),
        "-ltickwheel".to_owned(),
        format!("-Wl,--disable-new-dtags,-rpath,{}", dir.display()),
    ];
    let program = compile(&cc, C_FLAGS, "test_c.c", "test_c_shared", &link);
    run(&program, &[]);
}

#[test]
fn c_threads_on_each_others_shards() {
    let Some(cc) = Compiler::c() else { return };
    let program = compile(
        &cc,
        C_FLAGS,
        "test_threads.c",
        "test_threads",
        &static_link(),
    );
    let out = run(&program, &[]);
    assert!(out.contains("started 24000"), "{out}");
}

/// `ffi-tests/overload.c` is a measurement (`bash ffi-tests/run.sh overload`;
/// `examples/overload.rs` runs the same load from Rust). Here it only runs a
/// small load, so that it keeps building and working: it exits non-zero if a
/// timer fired early or not at all (within its 30 s limit). No timing is
/// checked.
#[test]
fn overload_program_fires_every_timer() {
    let Some(cc) = Compiler::c() else { return };
    let program = compile(&cc, C_FLAGS, "overload.c", "overload", &static_link());
    let out = run(&program, &["2", "500", "2", "5"]);
    assert!(out.contains("fired 1000 of 1000"), "{out}");
}

/// Compiles `source` with `flags` (which include -Werror) and returns the
/// compiler's stderr; the compilation must fail.
fn compile_fails(compiler: &Compiler, flags: &[&str], source: &str) -> String {
    let result = compiler
        .command()
        .args(flags)
        .arg("-I")
        .arg(root().join("include"))
        .args(["-c", "-o", "/dev/null"])
        .arg(root().join("ffi-tests").join(source))
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", compiler.name()));
    let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
    assert!(
        !result.status.success(),
        "{} accepted {source}, which must not compile:\n{stderr}",
        compiler.name()
    );
    stderr
}

/// Every C function that returns something is TW_MUST_USE: ignoring a
/// tw_result is a warning (an error under -Werror) in C11 (GCC's
/// warn_unused_result) and in C++17 ([[nodiscard]]); so is discarding the
/// `timer` that the C++ wrapper's `service::start` returns.
#[test]
fn ignoring_a_result_does_not_compile() {
    if let Some(cc) = Compiler::c() {
        let c = compile_fails(&cc, C_FLAGS, "ignored_result.c");
        assert!(
            c.contains("tw_timer_stop") && c.contains("warn_unused_result"),
            "{c}"
        );
    }
    let Some(cxx) = Compiler::cxx() else { return };
    let mut cxx_flags = vec!["-x", "c++"];
    cxx_flags.extend_from_slice(CXX_FLAGS);
    let as_cxx = compile_fails(&cxx, &cxx_flags, "ignored_result.c");
    assert!(
        as_cxx.contains("tw_timer_stop") && as_cxx.contains("nodiscard"),
        "{as_cxx}"
    );
    // The C++ wrapper: a discarded `timer` would stop at once.
    let timer = compile_fails(&cxx, CXX_FLAGS, "ignored_timer.cpp");
    assert!(
        timer.contains("service::start") && timer.contains("nodiscard"),
        "{timer}"
    );
}

#[test]
fn cpp_wrapper() {
    let Some(cxx) = Compiler::cxx() else { return };
    let program = compile(&cxx, CXX_FLAGS, "test_cpp.cpp", "test_cpp", &static_link());
    run(&program, &[]);
}

/// Destroying a timer's owner (or resetting the timer) while its callback
/// runs waits for the callback; destroying the service while callbacks use
/// their timers is safe (ffi-tests/run.sh runs it under ASan and TSan too).
#[test]
fn cpp_wrapper_lifetimes() {
    let Some(cxx) = Compiler::cxx() else { return };
    let program = compile(
        &cxx,
        CXX_FLAGS,
        "test_cpp_lifetime.cpp",
        "test_cpp_lifetime",
        &static_link(),
    );
    let out = run(&program, &[]);
    assert!(out.contains("4 tests passed"), "{out}");
}

/// The wrapper's `tw_result &status` API, built with -fno-exceptions.
#[test]
fn cpp_wrapper_without_exceptions() {
    let Some(cxx) = Compiler::cxx() else { return };
    let mut flags = CXX_FLAGS.to_vec();
    flags.push("-fno-exceptions");
    let program = compile(
        &cxx,
        &flags,
        "test_cpp_noexcept.cpp",
        "test_cpp_noexcept",
        &static_link(),
    );
    run(&program, &[]);
}

/// `ffi-tests/epoll_loop.c`: an embedded shard driven from an epoll loop
/// that sleeps for `tw_shard_next_timeout_ms`, one timer kept 50 ms ahead
/// (re-armed by its callback, then by the loop after collecting it). The
/// loop must never wake with nothing due, nor through the eventfd (CONTRACT 22:
/// an owner sleeps until its earliest deadline, not a cascade point). The
/// program checks and prints the counts; about 0.8 s.
#[test]
fn c_epoll_loop_wakes_once_per_expiry() {
    let Some(cc) = Compiler::c() else { return };
    let program = compile(&cc, C_FLAGS, "epoll_loop.c", "epoll_loop", &static_link());
    let out = run(&program, &["50", "8"]);
    assert!(out.contains("16 expiries, 16 wakeups"), "{out}");
}

#[test]
fn echo_server_closes_exactly_the_idle_connections_on_time() {
    let Some(cc) = Compiler::c() else { return };
    let server = compile(&cc, C_FLAGS, "echo_server.c", "echo_server", &static_link());
    let driver = compile(&cc, C_FLAGS, "echo_test.c", "echo_test", &[]);
    // 300 loopback connections, 100 active; idle timeout 500 ms; an idle one
    // must close within 500..750 ms of connecting (bounded: about 2 s).
    let server = server.display().to_string();
    let out = run(&driver, &["300", "500", "250", &server, "500"]);
    assert!(out.contains("200 idle connections closed"), "{out}");
    assert!(out.contains("100 active ones kept open"), "{out}");
}
