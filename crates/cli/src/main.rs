fn main() -> std::process::ExitCode {
    mcp_tasks::cli::main()
}
