//! The console's token: what allows the actions, compared in constant time, never shown.
use std::fmt;

use subtle::ConstantTimeEq;

/// The secret an operator types into an action's form. Its `Debug` and `Display` print
/// `***`, so a log line or an error that holds one shows nothing of it.
#[derive(Clone)]
pub(crate) struct Token(String);

impl Token {
    /// `secret` as the token; `None` for an empty one (no token: the console is read-only).
    pub(crate) fn new(secret: String) -> Option<Token> {
        (!secret.is_empty()).then_some(Token(secret))
    }

    /// Whether `given` is the token. The bytes are compared in constant time (`subtle`); only
    /// a different length answers early, which tells nothing of the token's bytes.
    pub(crate) fn matches(&self, given: &str) -> bool {
        self.0.as_bytes().ct_eq(given.as_bytes()).into()
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_only_the_same_bytes() {
        let token = Token::new("s3cret-token".into()).expect("a token");
        assert!(token.matches("s3cret-token"));
        for wrong in [
            "",
            "s3cret-toke",
            "s3cret-tokeN",
            "s3cret-token ",
            "S3CRET-TOKEN",
        ] {
            assert!(!token.matches(wrong), "{wrong:?}");
        }
        assert!(
            Token::new(String::new()).is_none(),
            "an empty token is none"
        );
        assert_eq!(format!("{token:?}"), "***");
    }
}
