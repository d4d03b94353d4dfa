//! edgecache-fakeapi
