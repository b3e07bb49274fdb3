//! The address of the connection a request came on.

use std::net::SocketAddr;

/// The address of the connection, inserted into request extensions by an adapter that
/// knows it (the local server; Lambda's `sourceIp`, a Worker's `CF-Connecting-IP`). Absent
/// means "not known to be loopback".
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);
