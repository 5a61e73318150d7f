//! Stop strings: the text of a reply passes through a [`StopText`], which
//! holds back what could be the start of a stop string and ends the reply
//! before the first one found.

/// The stop strings of a request and the text held back.
pub struct StopText {
    stops: Vec<String>,
    held: String,
}

impl StopText {
    /// A filter for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> StopText {
        let stops = stops.into_iter().filter(|s| !s.is_empty()).collect();
        StopText {
            stops,
            held: String::new(),
        }
    }

    /// Adds `piece`: the text that may be sent now, and whether a stop
    /// string was found (the text returned ends before it).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        self.held.push_str(piece);
        let found = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(i) = found {
            let out = self.held[..i].to_string();
            self.held.clear();
            return (out, true);
        }
        // The longest end of the held text that begins a stop string.
        let keep = self
            .stops
            .iter()
            .flat_map(|s| {
                s.char_indices()
                    .map(|(k, _)| k)
                    .skip(1)
                    .map(move |k| &s[..k])
            })
            .filter(|prefix| self.held.ends_with(prefix))
            .map(str::len)
            .max()
            .unwrap_or(0);
        let rest = self.held.split_off(self.held.len() - keep);
        (std::mem::replace(&mut self.held, rest), false)
    }

    /// The text held back, at the end of the reply.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_back_a_possible_stop_and_cuts_before_it() {
        let mut f = StopText::new(vec!["\n\n".into(), "END".into()]);
        assert_eq!(f.push("Hello\n"), ("Hello".into(), false));
        assert_eq!(f.push("x E"), ("\nx ".into(), false));
        assert_eq!(f.push("NDing"), (String::new(), true));
        let mut f = StopText::new(vec!["é!".into()]);
        assert_eq!(f.push("café"), ("caf".into(), false));
        assert_eq!(f.flush(), "é");
        let mut f = StopText::new(vec![]);
        assert_eq!(f.push("abc"), ("abc".into(), false));
    }
}
