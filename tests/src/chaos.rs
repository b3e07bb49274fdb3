//! A TCP proxy that can cut every connection and refuse new ones, to test what happens
//! when the database goes away and comes back (the idea of crates.io's chaosproxy).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Forwards `127.0.0.1:<port>` to a target until dropped.
pub struct ChaosProxy {
    addr: SocketAddr,
    down: Arc<AtomicBool>,
    /// Cancelled to close every live connection; replaced on restore.
    cut: Arc<std::sync::Mutex<CancellationToken>>,
    accept: JoinHandle<()>,
}

impl ChaosProxy {
    pub async fn start(target: SocketAddr) -> std::io::Result<ChaosProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let down = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(std::sync::Mutex::new(CancellationToken::new()));
        let (d, c) = (down.clone(), cut.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if d.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let token = c.lock().unwrap_or_else(|e| e.into_inner()).clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        () = token.cancelled() => {}
                    }
                });
            }
        });
        Ok(ChaosProxy { addr, down, cut, accept })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every connection and refuses new ones: the target looks gone.
    pub fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cut.lock().unwrap_or_else(|e| e.into_inner()).cancel();
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        *self.cut.lock().unwrap_or_else(|e| e.into_inner()) = CancellationToken::new();
        self.down.store(false, Ordering::SeqCst);
    }
}

impl Drop for ChaosProxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}
