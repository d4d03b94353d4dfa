//! edgecache-host
