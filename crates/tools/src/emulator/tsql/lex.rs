//! The T-SQL tokens: words, `[bracketed]` names, variables, numbers, strings (N'…' too)
//! and punctuation; comments and white space dropped.

use super::{TsqlError, syntax};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Word(String),
    /// A `[bracketed]` name: never a keyword.
    Quoted(String),
    Var(String),
    Int(i64),
    /// `N'…'`: an nvarchar literal.
    Str(String),
    /// `'…'`: a varchar literal (single bytes in SQL Server).
    AnsiStr(String),
    /// A binary literal, `0x…`.
    Bin(Vec<u8>),
    Punct(char),
}

impl Tok {
    pub(super) fn text(&self) -> String {
        match self {
            Tok::Word(w) | Tok::Quoted(w) | Tok::Var(w) | Tok::Str(w) | Tok::AnsiStr(w) => w.clone(),
            Tok::Int(i) => i.to_string(),
            Tok::Bin(b) => format!("0x{}", b.iter().map(|x| format!("{x:02X}")).collect::<String>()),
            Tok::Punct(c) => c.to_string(),
        }
    }
}

pub(super) fn lex(sql: &str) -> Result<Vec<Tok>, TsqlError> {
    let chars: Vec<char> = sql.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            loop {
                if i + 1 >= chars.len() {
                    return Err(TsqlError { number: 113, message: "Missing end comment mark '*/'.".into() });
                }
                if chars[i] == '/' && chars[i + 1] == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars[i + 1] == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '[' {
            let mut s = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    Some(']') if chars.get(i + 1) == Some(&']') => {
                        s.push(']');
                        i += 2;
                    }
                    Some(']') => {
                        i += 1;
                        break;
                    }
                    Some(&ch) => {
                        s.push(ch);
                        i += 1;
                    }
                    None => return Err(syntax(&s)),
                }
            }
            out.push(Tok::Quoted(s));
        } else if c == '\'' || ((c == 'N' || c == 'n') && chars.get(i + 1) == Some(&'\'')) {
            let unicode = c != '\'';
            i += if unicode { 2 } else { 1 };
            let mut s = String::new();
            loop {
                match chars.get(i) {
                    Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                        s.push('\'');
                        i += 2;
                    }
                    Some('\'') => {
                        i += 1;
                        break;
                    }
                    Some(&ch) => {
                        s.push(ch);
                        i += 1;
                    }
                    None => {
                        return Err(TsqlError {
                            number: 105,
                            message: format!("Unclosed quotation mark after the character string '{s}'."),
                        });
                    }
                }
            }
            out.push(if unicode { Tok::Str(s) } else { Tok::AnsiStr(s) });
        } else if c == '@' {
            let start = i;
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '@') {
                i += 1;
            }
            out.push(Tok::Var(chars[start..i].iter().collect::<String>().to_lowercase()));
        } else if c == '0' && matches!(chars.get(i + 1), Some('x' | 'X')) {
            // A binary literal: two hex digits a byte; an odd count has a leading 0 (as
            // SQL Server reads 0xABC as 0x0ABC); 0x alone is the empty value.
            let start = i + 2;
            i = start;
            while i < chars.len() && chars[i].is_ascii_hexdigit() {
                i += 1;
            }
            if chars.get(i).is_some_and(|c| c.is_alphanumeric() || *c == '_') {
                return Err(syntax(&chars[start - 2..=i].iter().collect::<String>()));
            }
            let mut hex: String = chars[start..i].iter().collect();
            if hex.len() % 2 == 1 {
                hex.insert(0, '0');
            }
            let bytes =
                (0..hex.len()).step_by(2).map(|k| u8::from_str_radix(&hex[k..k + 2], 16).unwrap_or(0)).collect();
            out.push(Tok::Bin(bytes));
        } else if c.is_ascii_digit()
            || (c == '-'
                && chars.get(i + 1).is_some_and(char::is_ascii_digit)
                && !matches!(out.last(), Some(Tok::Int(_) | Tok::Var(_) | Tok::Word(_) | Tok::Quoted(_))))
        {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            out.push(Tok::Int(text.parse().map_err(|_| syntax(&text))?));
        } else if c.is_alphabetic() || c == '_' || c == '#' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '#' || chars[i] == '$')
            {
                i += 1;
            }
            out.push(Tok::Word(chars[start..i].iter().collect()));
        } else if "(),.=;*<>!-".contains(c) {
            out.push(Tok::Punct(c));
            i += 1;
        } else {
            return Err(syntax(&c.to_string()));
        }
    }
    Ok(out)
}
