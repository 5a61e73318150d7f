//! llama.cpp's GBNF grammars (`root ::= "a" [b-z]* | other`) rewritten in
//! the Lark syntax llguidance reads: `root` becomes `start`, every rule a
//! lowercase Lark rule, strings JSON strings, character classes and `.`
//! regular expressions; grouping, alternatives and the repetitions `*`,
//! `+`, `?` and `{m,n}` keep their form (llguidance's Lark takes them).
//! A rule may span lines: a line that does not start `name ::=` continues
//! the rule before it.

use std::fmt::Write as _;

/// Whether `text` reads as GBNF: some line defines a rule with `::=`.
pub fn is_gbnf(text: &str) -> bool {
    text.lines().any(|l| rule_head(strip_comment(l)).is_some())
}

/// The GBNF grammar `text` in llguidance's Lark syntax, or what is wrong
/// with it (naming the line).
pub fn to_lark(text: &str) -> Result<String, String> {
    let mut rules: Vec<(String, String, usize)> = vec![];
    for (i, line) in text.lines().enumerate() {
        let line = strip_comment(line);
        if let Some((name, body)) = rule_head(line) {
            rules.push((name.to_string(), body.to_string(), i + 1));
        } else if !line.trim().is_empty() {
            let Some(last) = rules.last_mut() else {
                return Err(format!(
                    "GBNF line {}: text before the first rule (`name ::= ...`)",
                    i + 1
                ));
            };
            last.1.push(' ');
            last.1.push_str(line);
        }
    }
    if !rules.iter().any(|(n, _, _)| n == "root") {
        return Err("GBNF: no `root ::= ...` rule".into());
    }
    let mut out = String::new();
    for (name, body, line) in &rules {
        let body = body_to_lark(body).map_err(|e| format!("GBNF line {line} ({name}): {e}"))?;
        let _ = writeln!(out, "{}: {body}", rule_name(name));
    }
    Ok(out)
}

/// `name` and the rest after `::=`, if `line` starts a rule.
fn rule_head(line: &str) -> Option<(&str, &str)> {
    let (name, body) = line.split_once("::=")?;
    let name = name.trim();
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    ok.then_some((name, body))
}

/// The Lark name of GBNF rule `name`: `start` for `root`, else `r_` and the
/// name with each capital written `_` + its lowercase (Lark rules are
/// lowercase, and two GBNF names differing in case stay apart).
fn rule_name(name: &str) -> String {
    if name == "root" {
        return "start".into();
    }
    let mut out = String::from("r_");
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `line` without a `#` comment (one outside strings and classes).
fn strip_comment(line: &str) -> &str {
    let (mut in_str, mut in_class, mut escaped) = (false, false, false);
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' if in_str || in_class => escaped = true,
            '"' if !in_class => in_str = !in_str,
            '[' if !in_str => in_class = true,
            ']' if in_class => in_class = false,
            '#' if !in_str && !in_class => return &line[..i],
            _ => {}
        }
    }
    line
}

/// One rule's body in Lark.
fn body_to_lark(body: &str) -> Result<String, String> {
    let chars: Vec<char> = body.chars().collect();
    // The Lark tokens, joined by single spaces.
    let mut out: Vec<String> = vec![];
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' => {
                let (text, next) = read_quoted(&chars, i + 1, '"')?;
                out.push(serde_json::to_string(&text).map_err(|e| e.to_string())?);
                i = next;
            }
            '[' => {
                let (class, next) = read_class(&chars, i + 1)?;
                out.push(format!("/{class}/"));
                i = next;
            }
            '.' => {
                out.push("/(?s:.)/".into());
                i += 1;
            }
            '{' => {
                let end = chars[i..]
                    .iter()
                    .position(|&c| c == '}')
                    .ok_or("an unclosed `{`")?;
                let inner: String = chars[i + 1..i + end].iter().collect();
                let ok = inner
                    .split(',')
                    .all(|p| p.trim().chars().all(|c| c.is_ascii_digit()));
                if !ok || inner.trim().is_empty() {
                    return Err(format!(
                        "a repetition `{{{inner}}}` is not `{{m}}`, `{{m,}}` or `{{m,n}}`"
                    ));
                }
                out.push(format!("{{{}}}", inner.replace(' ', "")));
                i += end + 1;
            }
            '(' | ')' | '|' | '*' | '+' | '?' => {
                out.push(c.to_string());
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '-' || chars[i] == '_')
                {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                out.push(rule_name(&name));
            }
            other => return Err(format!("unexpected {other:?}")),
        }
    }
    Ok(out.join(" "))
}

/// The text of a quoted string from `from` (after the opening quote) to
/// the closing `close`, escapes undone, and the index after it.
fn read_quoted(chars: &[char], from: usize, close: char) -> Result<(String, usize), String> {
    let mut text = String::new();
    let mut i = from;
    while i < chars.len() {
        match chars[i] {
            c if c == close => return Ok((text, i + 1)),
            '\\' => {
                let (c, next) = read_escape(chars, i + 1)?;
                text.push(c);
                i = next;
            }
            c => {
                text.push(c);
                i += 1;
            }
        }
    }
    Err("an unclosed string".into())
}

/// The character of the escape whose letter is at `i`, and the index after.
fn read_escape(chars: &[char], i: usize) -> Result<(char, usize), String> {
    let hex = |len: usize| -> Result<(char, usize), String> {
        let digits: String = chars
            .get(i + 1..i + 1 + len)
            .ok_or("a short escape")?
            .iter()
            .collect();
        let code =
            u32::from_str_radix(&digits, 16).map_err(|_| format!("a bad escape \\{digits}"))?;
        let c = char::from_u32(code).ok_or(format!("no character U+{code:X}"))?;
        Ok((c, i + 1 + len))
    };
    match chars.get(i) {
        Some('n') => Ok(('\n', i + 1)),
        Some('r') => Ok(('\r', i + 1)),
        Some('t') => Ok(('\t', i + 1)),
        Some('x') => hex(2),
        Some('u') => hex(4),
        Some('U') => hex(8),
        Some(&c) => Ok((c, i + 1)),
        None => Err("an escape at the end".into()),
    }
}

/// A character class from `from` (after `[`) to its `]`, as the inside of
/// a Lark regular expression (`[...]`, every character escaped so that
/// neither the regex nor the `/` delimiters read it), and the index after.
fn read_class(chars: &[char], from: usize) -> Result<(String, usize), String> {
    let mut out = String::from("[");
    let mut i = from;
    if chars.get(i) == Some(&'^') {
        out.push('^');
        i += 1;
    }
    let mut any = false;
    while i < chars.len() {
        let c = match chars[i] {
            ']' => {
                if !any {
                    return Err("an empty character class".into());
                }
                out.push(']');
                return Ok((out, i + 1));
            }
            '-' if any && chars.get(i + 1) != Some(&']') => {
                out.push('-');
                i += 1;
                continue;
            }
            '\\' => {
                let (c, next) = read_escape(chars, i + 1)?;
                i = next;
                c
            }
            c => {
                i += 1;
                c
            }
        };
        any = true;
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            let _ = write!(out, "\\x{{{:X}}}", c as u32);
        }
    }
    Err("an unclosed character class".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gbnf_becomes_lark() {
        let g = "# yes or no\nroot ::= answer \"!\"{0,3}\nanswer ::= (\"yes\" | \"no\")\n  | [A-Z] [^\\n\\]]* .\n";
        assert!(is_gbnf(g));
        let lark = to_lark(g).unwrap();
        assert_eq!(
            lark,
            "start: r_answer \"!\" {0,3}\n\
             r_answer: ( \"yes\" | \"no\" ) | /[A-Z]/ /[^\\x{A}\\x{5D}]/ * /(?s:.)/\n"
        );
        assert!(!is_gbnf("start: \"a\" # ::= in a comment"));
        assert!(to_lark("answer ::= \"a\"").unwrap_err().contains("root"));
        assert!(to_lark("root ::= \"a").unwrap_err().contains("unclosed"));
        assert!(to_lark("root ::= []").unwrap_err().contains("empty"));
    }
}
