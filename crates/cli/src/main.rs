fn main() -> std::process::ExitCode {
    mcp_tasks::App::new().run()
}
