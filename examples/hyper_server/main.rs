//! An HTTP/1 server (hyper on async-io) whose header-read timeout runs on
//! tickwheel's timer service: a client that does not finish sending a
//! request's headers within the timeout is disconnected.
//!
//! ```text
//! cargo run --release --features hyper --example hyper_server -- [ADDR] [TIMEOUT_MS]
//! curl http://127.0.0.1:8080/hello            # served
//! # half a request: the server closes the connection after the timeout
//! bash -c 'exec 3<>/dev/tcp/127.0.0.1/8080; printf "GET / HTTP/1.1\r\nHost: x\r\n" >&3; cat <&3'
//! ```
//!
//! ADDR defaults to 127.0.0.1:8080, TIMEOUT_MS to 2000. Each connection's
//! end is printed with its cause.

mod server;

use std::net::TcpListener;
use std::process::ExitCode;
use std::time::Duration;

use tickwheel::TimerService;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let timeout_ms = match args.next().map(|ms| ms.parse::<u64>()) {
        None => 2000,
        Some(Ok(ms)) if ms > 0 => ms,
        Some(_) => {
            eprintln!("usage: hyper_server [ADDR] [TIMEOUT_MS]: TIMEOUT_MS is a positive integer");
            return ExitCode::from(2);
        }
    };
    let timers = match TimerService::new() {
        Ok(timers) => timers,
        Err(e) => {
            eprintln!("hyper_server: the timer service: {e}");
            return ExitCode::FAILURE;
        }
    };
    let listener = match TcpListener::bind(&addr) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("hyper_server: bind {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let local = listener.local_addr().map_or(addr, |a| a.to_string());
    println!("listening on http://{local}/ (header-read timeout {timeout_ms} ms, on tickwheel)");
    let error = server::run(
        listener,
        timers,
        Duration::from_millis(timeout_ms),
        |peer, outcome| match outcome {
            Ok(()) => println!("{peer}: closed"),
            Err(e) => println!("{peer}: {e}"),
        },
    );
    eprintln!("hyper_server: accept: {error}");
    ExitCode::FAILURE
}
