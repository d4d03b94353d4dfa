//! edgecache-steering
