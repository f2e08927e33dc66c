use std::path::PathBuf;

/// Every failure a user can cause is one of these, and each names where it happened
/// (file and byte offset, config key, or argument) and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}", io_message(.path, .source))]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: at byte offset {offset}: {msg}")]
    Trace { path: PathBuf, offset: u64, msg: String },
    /// A malformed line of a text trace (MQSim, lackey, CSV); lines count from 1.
    #[error("{path}:{line}: {msg}")]
    Line { path: PathBuf, line: u64, msg: String },
    /// A syntax error in a TOML file; lines and columns count from 1, as editors take them.
    #[error("{path}:{line}:{column}: {msg}")]
    Syntax { path: PathBuf, line: u64, column: u64, msg: String },
    /// A file or directory as a whole (no line of it): a directory without curves, say.
    #[error("{path}: {msg}")]
    Path { path: PathBuf, msg: String },
    #[error("config key `{key}`: {msg}")]
    Config { key: String, msg: String },
    #[error("unknown {kind} `{name}`; valid names: {valid}")]
    UnknownPlugin { kind: String, name: String, valid: String },
    #[error("{0}")]
    Sim(String),
    #[error("invalid argument `{arg}`: {msg}")]
    Arg { arg: String, msg: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A full disk reads the same from every command: "no space left writing FILE".
fn io_message(path: &std::path::Path, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::StorageFull {
        format!("no space left writing {}", path.display())
    } else {
        format!("{}: {e}", path.display())
    }
}

impl Error {
    pub fn config(key: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Config { key: key.into(), msg: msg.into() }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    pub fn trace(path: impl Into<PathBuf>, offset: u64, msg: impl Into<String>) -> Self {
        Error::Trace { path: path.into(), offset, msg: msg.into() }
    }

    pub fn line(path: impl Into<PathBuf>, line: u64, msg: impl Into<String>) -> Self {
        Error::Line { path: path.into(), line, msg: msg.into() }
    }

    pub fn arg(arg: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Arg { arg: arg.into(), msg: msg.into() }
    }

    /// Prefix the key of a config error, so errors raised deep inside a plugin's parameter
    /// table come out as `nodes.cxl0.params.channels`.
    pub fn under(self, prefix: &str) -> Self {
        match self {
            Error::Config { key, msg } => Error::Config { key: format!("{prefix}.{key}"), msg },
            other => other,
        }
    }
}
