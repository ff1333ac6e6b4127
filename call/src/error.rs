//! What can go wrong before a call runs, sorted by whose fault it is.

/// Why a call could not be prepared; the CLI turns the kind into its exit code and a serve
/// into a `malformed` or `refused` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    pub kind: ErrorKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The caller asked for something malformed (a target without `:function`, bad JSON).
    Usage,
    /// The target's file, module or function does not exist.
    NotFound,
    /// lfm itself failed (a pack that does not unpack, an unwritable cache).
    Failed,
}

impl CallError {
    pub fn usage(message: impl Into<String>) -> CallError {
        CallError {
            kind: ErrorKind::Usage,
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> CallError {
        CallError {
            kind: ErrorKind::NotFound,
            message: message.into(),
        }
    }

    pub fn failed(error: impl std::fmt::Display) -> CallError {
        CallError {
            kind: ErrorKind::Failed,
            message: error.to_string(),
        }
    }

    /// `{:#}` of an anyhow error: its whole chain of causes.
    pub fn failed_chain(error: &anyhow::Error) -> CallError {
        CallError::failed(format!("{error:#}"))
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CallError {}

pub type Result<T> = std::result::Result<T, CallError>;
