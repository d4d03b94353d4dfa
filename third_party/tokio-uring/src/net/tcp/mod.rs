mod listener;
pub use listener::TcpListener;

mod stream;
pub use stream::TcpStream;
