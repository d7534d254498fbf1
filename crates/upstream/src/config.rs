//! The configuration file (`--config` / `MCP_TASKS_CONFIG`): its exact TOML shape is a
//! public contract, so every key is checked and every error names the key and its line.

use std::collections::BTreeMap;
use std::time::Duration;

use mcp_tasks_tools::ExecutionPolicy;
use serde::Deserialize;
use toml::Spanned;

pub mod scheduling;

use scheduling::{Limits, RawLimits, RawScheduling, RawTenant, Scheduling};

/// One `[[upstream]]` entry, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    pub name: String,
    pub transport: Transport,
    pub prefix: String,
    /// `None`: every tool the upstream lists.
    pub tools: Option<Vec<String>>,
    pub defaults: ToolSettings,
    /// Per-tool overrides, by the upstream's own tool name, already merged over the defaults.
    pub overrides: BTreeMap<String, ToolSettings>,
    /// The largest message (a result, a tool list page) we take from it.
    pub max_result_bytes: usize,
}

/// `max_result_bytes` when the file does not say: results are stored (and read back on
/// every `tasks/get`), so a few MiB is generous for text and a handful of images.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 4 * 1024 * 1024;

/// What a stdio child inherits of our environment besides `inherit_env`: where programs
/// and its home are, its locale and time zone, and where temporary files go. Nothing that
/// configures mcp-tasks (or any other upstream) is among them.
pub const INHERITED_ENV: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"];

impl UpstreamConfig {
    /// The settings of one of its tools (by the upstream's own name).
    pub fn settings(&self, tool: &str) -> &ToolSettings {
        self.overrides.get(tool).unwrap_or(&self.defaults)
    }
}

#[derive(Clone, PartialEq)]
pub enum Transport {
    /// A child process (argv). Its environment is [`INHERITED_ENV`] and `inherit_env` of
    /// ours (those that are set), then `env`; nothing else of ours.
    Stdio {
        command: Vec<String>,
        env: BTreeMap<String, String>,
        inherit_env: Vec<String>,
    },
    /// A Streamable HTTP endpoint; header values are expanded from our environment.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values carry credentials, and env values may: never print them.
        match self {
            Self::Stdio {
                command,
                env,
                inherit_env,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("env", &env.keys().collect::<Vec<_>>())
                .field("inherit_env", inherit_env)
                .finish(),
            Self::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// The five keys a tool's execution takes, per upstream and per tool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ToolSettings {
    pub mode: ExecutionPolicy,
    /// May a run lost with its worker be run again?
    pub idempotent: bool,
    pub max_attempts: u32,
    pub ttl: Duration,
    /// One upstream call.
    pub timeout: Duration,
}

impl Default for ToolSettings {
    fn default() -> Self {
        Self {
            mode: ExecutionPolicy::TaskOptional,
            idempotent: false,
            max_attempts: 3,
            ttl: Duration::from_secs(3600),
            timeout: Duration::from_secs(600),
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    pub upstreams: Vec<UpstreamConfig>,
    /// How the queue is shared: weights, priorities, limits (`scheduling.rs`).
    pub scheduling: Scheduling,
}

/// Why a configuration file was refused: the key, its line, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct ConfigError {
    pub key: Option<String>,
    pub line: Option<usize>,
    pub message: String,
}

impl ConfigError {
    fn render(&self) -> String {
        match (&self.key, self.line) {
            (Some(key), Some(line)) => format!("line {line}: `{key}`: {}", self.message),
            (Some(key), None) => format!("`{key}`: {}", self.message),
            (None, Some(line)) => format!("line {line}: {}", self.message),
            (None, None) => self.message.clone(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    upstream: Vec<Spanned<RawUpstream>>,
    scheduling: Option<RawScheduling>,
    #[serde(default)]
    tenant: BTreeMap<String, RawTenant>,
    #[serde(default)]
    tool: BTreeMap<String, RawLimits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    name: Option<Spanned<String>>,
    command: Option<Spanned<Vec<String>>>,
    url: Option<Spanned<String>>,
    env: Option<Spanned<BTreeMap<String, String>>>,
    inherit_env: Option<Spanned<Vec<Spanned<String>>>>,
    headers: Option<Spanned<BTreeMap<String, String>>>,
    prefix: Option<Spanned<String>>,
    tools: Option<Spanned<Vec<String>>>,
    mode: Option<Spanned<Mode>>,
    idempotent: Option<bool>,
    max_attempts: Option<Spanned<i64>>,
    ttl_ms: Option<Spanned<i64>>,
    timeout_ms: Option<Spanned<i64>>,
    max_result_bytes: Option<Spanned<i64>>,
    max_concurrency: Option<Spanned<i64>>,
    max_per_second: Option<Spanned<f64>>,
    burst: Option<Spanned<i64>>,
    priority: Option<Spanned<i64>>,
    #[serde(default)]
    tool: BTreeMap<String, RawSettings>,
}

/// The per-tool keys: five of execution, four of scheduling. serde's `flatten` would lose
/// `deny_unknown_fields` and spans, so `[[upstream]]` spells them out too.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    mode: Option<Spanned<Mode>>,
    idempotent: Option<bool>,
    max_attempts: Option<Spanned<i64>>,
    ttl_ms: Option<Spanned<i64>>,
    timeout_ms: Option<Spanned<i64>>,
    max_concurrency: Option<Spanned<i64>>,
    max_per_second: Option<Spanned<f64>>,
    burst: Option<Spanned<i64>>,
    priority: Option<Spanned<i64>>,
}

impl RawSettings {
    fn limits(&self) -> RawLimits {
        RawLimits {
            max_concurrency: self.max_concurrency.clone(),
            max_per_second: self.max_per_second.clone(),
            burst: self.burst.clone(),
            priority: self.priority.clone(),
        }
    }
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
enum Mode {
    SyncOnly,
    TaskOptional,
    TaskRequired,
}

impl From<Mode> for ExecutionPolicy {
    fn from(m: Mode) -> Self {
        match m {
            Mode::SyncOnly => Self::SyncOnly,
            Mode::TaskOptional => Self::TaskOptional,
            Mode::TaskRequired => Self::TaskRequired,
        }
    }
}

pub(crate) struct Source<'a>(&'a str);

impl Source<'_> {
    fn line(&self, span: std::ops::Range<usize>) -> usize {
        let end = span.start.min(self.0.len());
        self.0.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    pub(crate) fn error<T>(
        &self,
        key: &str,
        span: std::ops::Range<usize>,
        message: impl Into<String>,
    ) -> Result<T, ConfigError> {
        Err(ConfigError {
            key: Some(key.to_owned()),
            line: Some(self.line(span)),
            message: message.into(),
        })
    }
}

impl Config {
    /// Reads and checks a configuration file.
    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            key: None,
            line: None,
            message: format!("cannot read {}: {e}", path.display()),
        })?;
        Self::parse(&text)
    }

    /// Checks a configuration file's text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let src = Source(text);
        let raw: RawFile = toml::from_str(text).map_err(|e| syntax_error(&src, &e))?;
        let mut upstreams: Vec<UpstreamConfig> = Vec::new();
        let mut tool_limits = BTreeMap::new();
        let mut groups = BTreeMap::new();
        for entry in raw.upstream {
            let span = entry.span();
            let u = entry.into_inner();
            let (checked, group, tools) = check_upstream(&src, span, u)?;
            if group.is_limited() || group.priority != 0 {
                groups.insert(checked.name.clone(), group);
            }
            tool_limits.extend(tools);
            if let Some(first) = upstreams.iter().find(|x| x.name == checked.name) {
                return Err(ConfigError {
                    key: Some("upstream.name".into()),
                    line: None,
                    message: format!("upstream {:?} is defined twice", first.name),
                });
            }
            upstreams.push(checked);
        }
        let scheduling = scheduling::check(
            &src,
            raw.scheduling,
            raw.tenant,
            raw.tool,
            tool_limits,
            groups,
        )?;
        Ok(Self {
            upstreams,
            scheduling,
        })
    }
}

fn syntax_error(src: &Source<'_>, e: &toml::de::Error) -> ConfigError {
    let message = e.message().to_owned();
    let named = ["unknown field `", "missing field `"]
        .iter()
        .find_map(|p| message.split_once(p))
        .and_then(|(_, rest)| rest.split('`').next())
        .map(str::to_owned);
    // Otherwise the key is the one on the line the error points at (a bad value).
    let on_line = e.span().and_then(|span| {
        let start = src.0[..span.start.min(src.0.len())]
            .rfind('\n')
            .map_or(0, |i| i + 1);
        let line = src.0[start..].lines().next()?;
        let key = line.split_once('=').map(|(k, _)| k)?.trim();
        (!key.is_empty()).then(|| key.to_owned())
    });
    ConfigError {
        key: named.or(on_line),
        line: e.span().map(|s| src.line(s)),
        message,
    }
}

/// One upstream, checked, with the limits its tools share and those of single tools (by
/// served name).
type Checked = (UpstreamConfig, Limits, BTreeMap<String, Limits>);

fn check_upstream(
    src: &Source<'_>,
    span: std::ops::Range<usize>,
    u: RawUpstream,
) -> Result<Checked, ConfigError> {
    let Some(name) = u.name else {
        return src.error("upstream.name", span, "every [[upstream]] needs a name");
    };
    let name_span = name.span();
    let name = name.into_inner();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return src.error(
            "upstream.name",
            name_span,
            format!("{name:?} must match [a-z0-9_-]+"),
        );
    }
    let ctx = |key: &str| format!("upstream.{key}");
    let transport = match (u.command, u.url) {
        (Some(_), Some(url)) => {
            return src.error(
                &ctx("url"),
                url.span(),
                format!("upstream {name:?} has both `command` and `url`; give exactly one"),
            );
        }
        (None, None) => {
            return src.error(
                &ctx("command"),
                span,
                format!("upstream {name:?} has neither `command` nor `url`; give exactly one"),
            );
        }
        (Some(command), None) => {
            if let Some(h) = &u.headers {
                return src.error(
                    &ctx("headers"),
                    h.span(),
                    "`headers` is for `url` upstreams only",
                );
            }
            let command_span = command.span();
            let command = command.into_inner();
            if command.first().is_none_or(String::is_empty) {
                return src.error(
                    &ctx("command"),
                    command_span,
                    "the command must name a program",
                );
            }
            Transport::Stdio {
                command,
                env: u.env.map(Spanned::into_inner).unwrap_or_default(),
                inherit_env: inherit_env(src, u.inherit_env)?,
            }
        }
        (None, Some(url)) => {
            if let Some(e) = &u.env {
                return src.error(
                    &ctx("env"),
                    e.span(),
                    "`env` is for `command` upstreams only",
                );
            }
            if let Some(e) = &u.inherit_env {
                return src.error(
                    &ctx("inherit_env"),
                    e.span(),
                    "`inherit_env` is for `command` upstreams only",
                );
            }
            let url_span = url.span();
            let url = url.into_inner();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return src.error(
                    &ctx("url"),
                    url_span,
                    format!("{url:?} is not an http(s) URL"),
                );
            }
            let headers = u.headers.map(Spanned::into_inner).unwrap_or_default();
            for (header, value) in &headers {
                // Checked now so a typo is a start-up error, not a failed call later.
                expand_env(value).map_err(|var| ConfigError {
                    key: Some(format!("upstream.headers.{header}")),
                    line: None,
                    message: format!("${{{var}}} is not set in the environment"),
                })?;
            }
            Transport::Http { url, headers }
        }
    };
    let prefix = u.prefix.map(Spanned::into_inner).unwrap_or_default();
    let own = RawSettings {
        mode: u.mode,
        idempotent: u.idempotent,
        max_attempts: u.max_attempts,
        ttl_ms: u.ttl_ms,
        timeout_ms: u.timeout_ms,
        max_concurrency: u.max_concurrency,
        max_per_second: u.max_per_second,
        burst: u.burst,
        priority: u.priority,
    };
    let group = scheduling::limits(src, &ctx(""), &own.limits())?;
    let defaults = settings(src, &ctx(""), &own, ToolSettings::default())?;
    let max_result_bytes = match &u.max_result_bytes {
        None => DEFAULT_MAX_RESULT_BYTES,
        Some(v) => {
            // From 1 KiB (an error message fits) to 256 MiB (beyond that, a task's result
            // is no place for it).
            let (min, max) = (1024, 256 * 1024 * 1024);
            let n = *v.get_ref();
            if !(min..=max).contains(&n) {
                return src.error(
                    &ctx("max_result_bytes"),
                    v.span(),
                    format!("{n} is out of range ({min} to {max})"),
                );
            }
            usize::try_from(n).unwrap_or(DEFAULT_MAX_RESULT_BYTES)
        }
    };
    let mut overrides = BTreeMap::new();
    let mut tool_limits = BTreeMap::new();
    for (tool, raw) in u.tool {
        let key = format!("upstream.tool.{tool:?}.");
        let merged = settings(src, &key, &raw, defaults)?;
        let limits = scheduling::limits(src, &key, &raw.limits())?;
        if limits != Limits::default() {
            tool_limits.insert(format!("{prefix}{tool}"), limits);
        }
        overrides.insert(tool, merged);
    }
    let config = UpstreamConfig {
        name,
        transport,
        prefix,
        tools: u.tools.map(Spanned::into_inner),
        defaults,
        overrides,
        max_result_bytes,
    };
    Ok((config, group, tool_limits))
}

/// `inherit_env`: names of variables (checked), never mcp-tasks' own configuration.
fn inherit_env(
    src: &Source<'_>,
    raw: Option<Spanned<Vec<Spanned<String>>>>,
) -> Result<Vec<String>, ConfigError> {
    let key = "upstream.inherit_env";
    let mut names: Vec<String> = Vec::new();
    for name in raw.map(Spanned::into_inner).unwrap_or_default() {
        let span = name.span();
        let name = name.into_inner();
        let valid = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return src.error(
                key,
                span,
                format!("{name:?} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"),
            );
        }
        // These hold the database's password, the keys that sign sessions and tokens, and
        // the like: a child that needs one of them needs a value of its own in `env`.
        if name == "DATABASE_URL" || name.starts_with("MCP_TASKS_") {
            return src.error(
                key,
                span,
                format!("{name} configures mcp-tasks itself and is never passed to an upstream"),
            );
        }
        if names.contains(&name) {
            return src.error(key, span, format!("{name} is named twice"));
        }
        names.push(name);
    }
    Ok(names)
}

fn settings(
    src: &Source<'_>,
    key: &str,
    raw: &RawSettings,
    base: ToolSettings,
) -> Result<ToolSettings, ConfigError> {
    let mut s = base;
    if let Some(mode) = &raw.mode {
        s.mode = (*mode.get_ref()).into();
    }
    if let Some(i) = raw.idempotent {
        s.idempotent = i;
    }
    let positive = |name: &str, v: &Spanned<i64>, max: i64| -> Result<u64, ConfigError> {
        let n = *v.get_ref();
        if n < 1 || n > max {
            return src.error(
                &format!("{key}{name}"),
                v.span(),
                format!("{n} is out of range (1 to {max})"),
            );
        }
        Ok(n.unsigned_abs())
    };
    if let Some(v) = &raw.max_attempts {
        s.max_attempts = u32::try_from(positive("max_attempts", v, 100)?).unwrap_or(100);
    }
    // A year: longer is a typo, and PostgreSQL intervals stay well in range.
    const YEAR_MS: i64 = 365 * 24 * 3600 * 1000;
    if let Some(v) = &raw.ttl_ms {
        s.ttl = Duration::from_millis(positive("ttl_ms", v, YEAR_MS)?);
    }
    if let Some(v) = &raw.timeout_ms {
        s.timeout = Duration::from_millis(positive("timeout_ms", v, YEAR_MS)?);
    }
    Ok(s)
}

/// Expands `${VAR}` from the process environment; `Err(VAR)` names an unset one.
pub fn expand_env(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let var = &after[..end];
        match std::env::var(var) {
            Ok(v) => out.push_str(&v),
            Err(_) => return Err(var.to_owned()),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
