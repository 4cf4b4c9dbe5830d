//! An HTTP/1 server whose timeouts run on a tickwheel `TimerService`: hyper
//! for HTTP, async-io for the sockets, one thread per connection. Shared by
//! the example's `main.rs` and by `tests/hyper_timer.rs`, which drives it
//! with clients that stall.

use std::convert::Infallible;
use std::error::Error;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread;
use std::time::Duration;

use async_io::Async;
use futures_lite::{AsyncRead, AsyncWrite};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use tickwheel::TimerService;

/// Why a connection ended, when it did not end cleanly.
pub type ConnectionError = Box<dyn Error + Send + Sync>;

/// Accepts connections on `listener` until accepting fails, serving each on
/// a thread of its own. A client that takes longer than
/// `header_read_timeout` to send a request's headers is disconnected (hyper
/// arms the timeout on `timers`). `on_close` hears how each connection ended.
pub fn run<F>(
    listener: TcpListener,
    timers: TimerService,
    header_read_timeout: Duration,
    on_close: F,
) -> io::Error
where
    F: Fn(SocketAddr, Result<(), ConnectionError>) + Send + Sync + 'static,
{
    let on_close = Arc::new(on_close);
    loop {
        let (stream, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            // The peer gave up before we took it: nothing to serve.
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
            Err(e) => return e,
        };
        let timers = timers.clone();
        let on_close = on_close.clone();
        thread::spawn(move || {
            let outcome = async_io::block_on(serve(stream, &timers, header_read_timeout));
            on_close(peer, outcome);
        });
    }
}

/// Serves one connection to its end.
async fn serve(
    stream: TcpStream,
    timers: &TimerService,
    header_read_timeout: Duration,
) -> Result<(), ConnectionError> {
    let io = FuturesIo(Async::new(stream)?);
    let handler = service_fn(|request: Request<Incoming>| async move {
        let body = format!("{} {}\n", request.method(), request.uri().path());
        Ok::<_, Infallible>(Response::new(body))
    });
    http1::Builder::new()
        .timer(timers.clone())
        .header_read_timeout(header_read_timeout)
        .serve_connection(io, handler)
        .await?;
    Ok(())
}

/// hyper's I/O traits over a `futures-io` stream (async-io's sockets).
pub struct FuturesIo<T>(pub T);

impl<T: AsyncRead + Unpin> hyper::rt::Read for FuturesIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        // Through an initialised buffer and a copy: safe code, and the
        // copy is nothing beside a system call.
        let mut chunk = [0u8; 4096];
        let len = buf.remaining().min(chunk.len());
        match Pin::new(&mut self.0).poll_read(cx, &mut chunk[..len]) {
            Poll::Ready(Ok(n)) => {
                buf.put_slice(&chunk[..n]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncWrite + Unpin> hyper::rt::Write for FuturesIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_close(cx)
    }
}
