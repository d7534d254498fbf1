// Set here, in the binary, not in `App`: a binary built with `App` picks its own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    mcp_tasks::App::new().run()
}
