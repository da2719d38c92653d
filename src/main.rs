//! The `dcache` binary.

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "dcache",
    version,
    about = "The Linux VFS name-lookup fast path in userspace"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve a backend through FUSE on MOUNTPOINT.
    Mount(dcache::fuse::MountArgs),
}

#[cfg(not(loom))]
fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Mount(a) => dcache::fuse::cli::main(a),
    };
    std::process::exit(code);
}

#[cfg(loom)]
fn main() {
    eprintln!("dcache: this build is for loom tests; rebuild without --cfg loom");
    std::process::exit(2);
}
