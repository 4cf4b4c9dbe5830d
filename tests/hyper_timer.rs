//! hyper's `Timer` on a `TimerService` (the `hyper` feature): the example
//! server's header-read timeout cuts off a client that stalls half-way
//! through its request, never before the timeout, while a prompt client is
//! served; `reset` moves a tickwheel sleep in place and replaces another
//! timer's sleep.

#[path = "../examples/hyper_server/server.rs"]
mod server;

use std::future::Future;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::pin::Pin;
use std::sync::mpsc;
use std::task::{Context, Poll};
use std::thread;
use std::time::{Duration, Instant};

use hyper::rt::Timer;
use tickwheel::TimerService;

/// How long a test waits for something that should take a fraction of it
/// before it calls it lost.
const LOST: Duration = Duration::from_secs(20);

/// How each connection of the server ended, by the client's address.
type Ends = mpsc::Receiver<(SocketAddr, Result<(), server::ConnectionError>)>;

/// The example's server on a free port of 127.0.0.1: its address, and how
/// its connections end.
fn start_server(timers: &TimerService, header_read_timeout: Duration) -> (SocketAddr, Ends) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (closed, ends) = mpsc::channel();
    let timers = timers.clone();
    thread::spawn(move || {
        server::run(
            listener,
            timers,
            header_read_timeout,
            move |peer, outcome| {
                let _ = closed.send((peer, outcome));
            },
        )
    });
    (addr, ends)
}

#[test]
fn a_stalled_client_is_cut_off_after_the_timeout_and_a_prompt_one_is_served() {
    let timers = TimerService::new().unwrap();
    let timeout = Duration::from_millis(300);
    let (addr, ends) = start_server(&timers, timeout);

    // Half a request: the request line and one header, no blank line.
    let started = Instant::now();
    let mut staller = TcpStream::connect(addr).unwrap();
    staller
        .write_all(b"GET /slow HTTP/1.1\r\nHost: tickwheel\r\n")
        .unwrap();
    staller.set_read_timeout(Some(LOST)).unwrap();

    // Meanwhile a whole request is answered.
    let mut prompt = TcpStream::connect(addr).unwrap();
    prompt.set_read_timeout(Some(LOST)).unwrap();
    prompt
        .write_all(b"GET /hello HTTP/1.1\r\nHost: tickwheel\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    prompt.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response:?}");
    assert!(response.ends_with("\r\n\r\nGET /hello\n"), "{response:?}");

    // The staller's connection ends from the server's side: end of stream
    // (or a reset), not our read timeout, and not before the timeout.
    let mut rest = Vec::new();
    match staller.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the stalled client was not cut off within {LOST:?}: {e}"),
    }
    let waited = started.elapsed();
    assert!(
        waited >= timeout,
        "cut off after {waited:?}, before the {timeout:?} timeout"
    );
    assert!(
        !String::from_utf8_lossy(&rest).contains("GET /slow"),
        "the half request was answered: {rest:?}"
    );

    // The server saw one clean close and one header-read timeout, on the
    // staller's connection.
    let staller_peer = staller.local_addr().unwrap();
    let prompt_peer = prompt.local_addr().unwrap();
    for _ in 0..2 {
        let (peer, outcome) = ends.recv_timeout(LOST).expect("a connection never ended");
        if peer == staller_peer {
            let error = outcome.expect_err("the stalled connection ended cleanly");
            let error = error
                .downcast_ref::<hyper::Error>()
                .unwrap_or_else(|| panic!("not hyper's error: {error}"));
            assert!(error.is_timeout(), "ended by {error}, not the timeout");
        } else {
            assert_eq!(peer, prompt_peer);
            outcome.unwrap();
        }
    }
}

/// Polls `future` to completion on this thread.
fn block_on<F: Future>(future: F) -> F::Output {
    futures_lite::future::block_on(future)
}

#[test]
fn reset_moves_a_tickwheel_sleep_in_place_and_never_completes_early() {
    let timers = TimerService::new().unwrap();
    let mut sleep = Timer::sleep(&timers, Duration::from_millis(5));
    // Registered (armed) before the reset, as hyper's sleeps are.
    assert!(block_on(futures_lite::future::poll_once(sleep.as_mut())).is_none());
    let before = &*sleep as *const dyn hyper::rt::Sleep as *const ();
    let deadline = Instant::now() + Duration::from_millis(40);
    timers.reset(&mut sleep, deadline);
    let after = &*sleep as *const dyn hyper::rt::Sleep as *const ();
    assert_eq!(
        before, after,
        "reset made a new sleep instead of moving ours"
    );
    block_on(sleep.as_mut());
    let now = Instant::now();
    assert!(now >= deadline, "completed {:?} early", deadline - now);
}

/// Another timer's sleep, as hyper may hold one made before its timer was
/// replaced: never completes by itself.
struct ForeignSleep;

impl Future for ForeignSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
}

impl hyper::rt::Sleep for ForeignSleep {}

#[test]
fn reset_replaces_another_timers_sleep_with_a_tickwheel_one() {
    let timers = TimerService::new().unwrap();
    let mut sleep: Pin<Box<dyn hyper::rt::Sleep>> = Box::pin(ForeignSleep);
    let deadline = Instant::now() + Duration::from_millis(10);
    timers.reset(&mut sleep, deadline);
    assert!(sleep.as_mut().downcast_mut_pin::<ForeignSleep>().is_none());
    let ours = sleep
        .as_mut()
        .downcast_mut_pin::<tickwheel::future::Sleep>()
        .expect("reset kept the foreign sleep");
    assert!(ours.deadline() >= deadline);
    block_on(sleep.as_mut());
    assert!(Instant::now() >= deadline);
}
