//! Filesystem manipulation operations.

mod directory;
pub use directory::create_dir;
pub use directory::remove_dir;

mod create_dir_all;
pub use create_dir_all::create_dir_all;
pub use create_dir_all::DirBuilder;

mod file;
pub use file::remove_file;
pub use file::rename;
pub use file::File;

mod open_options;
pub use open_options::OpenOptions;

mod statx;
pub use statx::is_dir_regfile;
pub use statx::statx;
pub use statx::StatxBuilder;
