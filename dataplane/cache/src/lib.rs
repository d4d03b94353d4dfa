//! edgecache-cache: the cache's policy (pure RFC 9111 decisions that take `now`) and its storage
//! engine (segment log on NVMe, read through io_uring or a thread pool). It knows no server and
//! no Kubernetes.

pub mod policy;
