mod accept;

mod close;

mod connect;

mod fallocate;

mod fsync;

mod mkdir_at;

mod noop;
pub(crate) use noop::NoOp;

mod open;

mod read;

mod read_fixed;

mod readv;

mod recv_from;

mod recvmsg;

mod rename_at;

mod send_to;

mod send_zc;

mod sendmsg;

mod sendmsg_zc;

mod shared_fd;
pub(crate) use shared_fd::SharedFd;

mod socket;
pub(crate) use socket::Socket;

mod statx;

mod unlink_at;

mod util;
pub(crate) use util::cstr;

pub(crate) mod write;

mod write_fixed;

mod writev;

mod writev_all;
pub(crate) use writev_all::writev_at_all;
