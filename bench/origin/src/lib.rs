//! edgecache-origin
