mod listener;
pub use listener::UnixListener;

mod stream;
pub use stream::UnixStream;
