//! The emulator's T-SQL recogniser: a batch of text into [`Statement`]s. It knows the
//! Service Broker statements (`[WAITFOR (] RECEIVE …`, `GET CONVERSATION GROUP`, `BEGIN
//! DIALOG`, `SEND`, `END CONVERSATION`, `MOVE CONVERSATION`), transactions, `SET
//! XACT_ABORT|NOCOUNT`, `DECLARE`, `SET @v =`, and `EXEC` of a procedure with named
//! arguments; keywords in any case, `[bracketed]` names, `--` and `/* */` comments,
//! optional semicolons. Anything else is refused: error 102 for what is not T-SQL, a
//! "not supported by the emulator" error (severity 16) for T-SQL it does not run.

/// A value in a statement: a variable or parameter, or a literal.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Var(String),
    Int(i64),
    Str(String),
    Null,
}

/// `WHERE conversation_group_id = …` or `WHERE conversation_handle = …`.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    Group(Value),
    Handle(Value),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tran {
    Begin,
    Commit,
    Rollback,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    Receive {
        waitfor: bool,
        top: Option<Value>,
        /// Column names as written (`*` is one entry `*`).
        columns: Vec<String>,
        queue: String,
        filter: Option<Filter>,
        timeout: Option<Value>,
    },
    GetConversationGroup {
        waitfor: bool,
        var: String,
        queue: String,
        timeout: Option<Value>,
    },
    BeginDialog {
        handle_var: String,
        from_service: String,
        to_service: Value,
        contract: String,
        related_group: Option<Value>,
        lifetime: Option<Value>,
        encryption: Option<bool>,
    },
    Send {
        handle: Value,
        message_type: Option<String>,
        body: Option<Value>,
    },
    EndConversation {
        handle: Value,
        error: Option<(Value, Value)>,
        cleanup: bool,
    },
    MoveConversation {
        handle: Value,
        group: Value,
    },
    Transaction(Tran),
    SetOption {
        option: String,
        on: bool,
    },
    Declare {
        var: String,
        ty: String,
        value: Option<Value>,
    },
    SetVar {
        var: String,
        value: Value,
    },
    Exec {
        procedure: String,
        args: Vec<(String, Value)>,
    },
    /// `SELECT @a, @b`: the variables' values as one row.
    SelectVars(Vec<String>),
}

/// Why a batch is refused, as SQL Server would say it: the error number and text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (error {number})")]
pub struct TsqlError {
    pub number: i32,
    pub message: String,
}

/// Error number of statements the emulator recognises as T-SQL but does not run.
pub const NOT_SUPPORTED: i32 = 50100;

fn syntax(near: &str) -> TsqlError {
    TsqlError { number: 102, message: format!("Incorrect syntax near '{near}'.") }
}

fn unsupported(what: &str) -> TsqlError {
    TsqlError { number: NOT_SUPPORTED, message: format!("{what} is not supported by the emulator.") }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    /// A `[bracketed]` name: never a keyword.
    Quoted(String),
    Var(String),
    Int(i64),
    Str(String),
    Punct(char),
}

impl Tok {
    fn text(&self) -> String {
        match self {
            Tok::Word(w) | Tok::Quoted(w) | Tok::Var(w) | Tok::Str(w) => w.clone(),
            Tok::Int(i) => i.to_string(),
            Tok::Punct(c) => c.to_string(),
        }
    }
}

fn lex(sql: &str) -> Result<Vec<Tok>, TsqlError> {
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
            i += if c == '\'' { 1 } else { 2 };
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
            out.push(Tok::Str(s));
        } else if c == '@' {
            let start = i;
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '@') {
                i += 1;
            }
            out.push(Tok::Var(chars[start..i].iter().collect::<String>().to_lowercase()));
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
        } else if "(),.=;*".contains(c) {
            out.push(Tok::Punct(c));
            i += 1;
        } else {
            return Err(syntax(&c.to_string()));
        }
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Tok>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    fn near(&self) -> String {
        self.peek().map_or_else(|| "end of batch".into(), Tok::text)
    }

    fn is_kw(&self, kw: &str) -> bool {
        matches!(self.peek(), Some(Tok::Word(w)) if w.eq_ignore_ascii_case(kw))
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        let yes = self.is_kw(kw);
        if yes {
            self.at += 1;
        }
        yes
    }

    fn kw(&mut self, kw: &str) -> Result<(), TsqlError> {
        if self.eat_kw(kw) { Ok(()) } else { Err(syntax(&self.near())) }
    }

    fn eat_punct(&mut self, p: char) -> bool {
        let yes = self.peek() == Some(&Tok::Punct(p));
        if yes {
            self.at += 1;
        }
        yes
    }

    fn punct(&mut self, p: char) -> Result<(), TsqlError> {
        if self.eat_punct(p) { Ok(()) } else { Err(syntax(&self.near())) }
    }

    fn var(&mut self) -> Result<String, TsqlError> {
        match self.peek().cloned() {
            Some(Tok::Var(v)) => {
                self.at += 1;
                Ok(v)
            }
            _ => Err(syntax(&self.near())),
        }
    }

    /// A name: one part or several separated by dots, brackets removed.
    fn name(&mut self) -> Result<String, TsqlError> {
        let mut parts = Vec::new();
        loop {
            match self.peek().cloned() {
                Some(Tok::Word(w)) | Some(Tok::Quoted(w)) => {
                    self.at += 1;
                    parts.push(w);
                }
                _ => return Err(syntax(&self.near())),
            }
            if !self.eat_punct('.') {
                return Ok(parts.join("."));
            }
        }
    }

    fn value(&mut self) -> Result<Value, TsqlError> {
        let v = match self.peek().cloned() {
            Some(Tok::Var(v)) => Value::Var(v),
            Some(Tok::Int(i)) => Value::Int(i),
            Some(Tok::Str(s)) => Value::Str(s),
            Some(Tok::Word(w)) if w.eq_ignore_ascii_case("NULL") => Value::Null,
            Some(Tok::Punct('(')) => {
                self.at += 1;
                let v = self.value()?;
                self.punct(')')?;
                return Ok(v);
            }
            _ => return Err(syntax(&self.near())),
        };
        self.at += 1;
        Ok(v)
    }

    fn end_of_statement(&mut self) {
        while self.eat_punct(';') {}
    }

    fn statement(&mut self) -> Result<Statement, TsqlError> {
        if self.eat_kw("WAITFOR") {
            if self.is_kw("DELAY") || self.is_kw("TIME") {
                return Err(unsupported("WAITFOR DELAY/TIME"));
            }
            self.punct('(')?;
            let inner = if self.is_kw("RECEIVE") { self.receive(true)? } else { self.get_group(true)? };
            self.punct(')')?;
            let timeout = if self.eat_punct(',') {
                self.kw("TIMEOUT")?;
                Some(self.value()?)
            } else {
                None
            };
            return Ok(match inner {
                Statement::Receive { waitfor, top, columns, queue, filter, .. } => {
                    Statement::Receive { waitfor, top, columns, queue, filter, timeout }
                }
                Statement::GetConversationGroup { waitfor, var, queue, .. } => {
                    Statement::GetConversationGroup { waitfor, var, queue, timeout }
                }
                other => other,
            });
        }
        if self.is_kw("RECEIVE") {
            return self.receive(false);
        }
        if self.is_kw("GET") {
            return self.get_group(false);
        }
        if self.eat_kw("BEGIN") {
            if self.eat_kw("DIALOG") {
                return self.begin_dialog();
            }
            if self.eat_kw("TRAN") || self.eat_kw("TRANSACTION") {
                return Ok(Statement::Transaction(Tran::Begin));
            }
            return Err(unsupported("BEGIN … END blocks"));
        }
        if self.eat_kw("COMMIT") {
            let _ = self.eat_kw("TRAN") || self.eat_kw("TRANSACTION") || self.eat_kw("WORK");
            return Ok(Statement::Transaction(Tran::Commit));
        }
        if self.eat_kw("ROLLBACK") {
            let _ = self.eat_kw("TRAN") || self.eat_kw("TRANSACTION") || self.eat_kw("WORK");
            return Ok(Statement::Transaction(Tran::Rollback));
        }
        if self.eat_kw("SEND") {
            self.kw("ON")?;
            self.kw("CONVERSATION")?;
            let handle = self.value()?;
            let message_type = if self.eat_kw("MESSAGE") {
                self.kw("TYPE")?;
                Some(self.name()?)
            } else {
                None
            };
            let body = if self.peek() == Some(&Tok::Punct('(')) { Some(self.value()?) } else { None };
            return Ok(Statement::Send { handle, message_type, body });
        }
        if self.eat_kw("END") {
            self.kw("CONVERSATION")?;
            let handle = self.value()?;
            if self.eat_kw("WITH") {
                if self.eat_kw("CLEANUP") {
                    return Ok(Statement::EndConversation { handle, error: None, cleanup: true });
                }
                self.kw("ERROR")?;
                self.punct('=')?;
                let code = self.value()?;
                self.kw("DESCRIPTION")?;
                self.punct('=')?;
                let text = self.value()?;
                return Ok(Statement::EndConversation { handle, error: Some((code, text)), cleanup: false });
            }
            return Ok(Statement::EndConversation { handle, error: None, cleanup: false });
        }
        if self.eat_kw("MOVE") {
            self.kw("CONVERSATION")?;
            let handle = self.value()?;
            self.kw("TO")?;
            let group = self.value()?;
            return Ok(Statement::MoveConversation { handle, group });
        }
        if self.eat_kw("SET") {
            if let Some(Tok::Var(_)) = self.peek() {
                let var = self.var()?;
                self.punct('=')?;
                let value = self.value()?;
                return Ok(Statement::SetVar { var, value });
            }
            let option = self.name()?.to_uppercase();
            if !["XACT_ABORT", "NOCOUNT"].contains(&option.as_str()) {
                return Err(unsupported(&format!("SET {option}")));
            }
            let on = if self.eat_kw("ON") {
                true
            } else if self.eat_kw("OFF") {
                false
            } else {
                return Err(syntax(&self.near()));
            };
            return Ok(Statement::SetOption { option, on });
        }
        if self.eat_kw("DECLARE") {
            let var = self.var()?;
            let _ = self.eat_kw("AS");
            let mut ty = self.name()?;
            if self.eat_punct('(') {
                let size = match self.peek().cloned() {
                    Some(Tok::Int(n)) => n.to_string(),
                    Some(Tok::Word(w)) if w.eq_ignore_ascii_case("MAX") => "max".into(),
                    _ => return Err(syntax(&self.near())),
                };
                self.at += 1;
                self.punct(')')?;
                ty = format!("{ty}({size})");
            }
            let value = if self.eat_punct('=') { Some(self.value()?) } else { None };
            return Ok(Statement::Declare { var, ty: ty.to_lowercase(), value });
        }
        if self.is_kw("SELECT") && matches!(self.toks.get(self.at + 1), Some(Tok::Var(_))) {
            self.at += 1;
            let mut vars = vec![self.var()?];
            while self.eat_punct(',') {
                vars.push(self.var()?);
            }
            if self.is_kw("FROM") || self.peek() == Some(&Tok::Punct('=')) {
                return Err(unsupported("SELECT beyond a list of variables"));
            }
            return Ok(Statement::SelectVars(vars));
        }
        if self.eat_kw("EXEC") || self.eat_kw("EXECUTE") {
            let procedure = self.name()?;
            let mut args = Vec::new();
            if matches!(self.peek(), Some(Tok::Var(_))) {
                loop {
                    let name = self.var()?;
                    self.punct('=')?;
                    args.push((name, self.value()?));
                    if !self.eat_punct(',') {
                        break;
                    }
                }
            }
            return Ok(Statement::Exec { procedure, args });
        }
        match self.peek() {
            Some(Tok::Word(w)) => Err(unsupported(&w.to_uppercase())),
            _ => Err(syntax(&self.near())),
        }
    }

    fn receive(&mut self, waitfor: bool) -> Result<Statement, TsqlError> {
        self.kw("RECEIVE")?;
        let top = if self.eat_kw("TOP") {
            self.punct('(')?;
            let v = self.value()?;
            self.punct(')')?;
            Some(v)
        } else {
            None
        };
        let mut columns = Vec::new();
        loop {
            if self.eat_punct('*') {
                columns.push("*".into());
            } else {
                let c = self.name()?;
                if self.eat_kw("AS") {
                    let alias = self.name()?;
                    columns.push(format!("{c} AS {alias}"));
                } else {
                    columns.push(c);
                }
            }
            if !self.eat_punct(',') {
                break;
            }
        }
        self.kw("FROM")?;
        let queue = self.name()?;
        if self.is_kw("INTO") {
            return Err(unsupported("RECEIVE … INTO"));
        }
        let filter = if self.eat_kw("WHERE") {
            let column = self.name()?.to_lowercase();
            self.punct('=')?;
            let v = self.value()?;
            match column.as_str() {
                "conversation_group_id" => Some(Filter::Group(v)),
                "conversation_handle" => Some(Filter::Handle(v)),
                _ => return Err(syntax(&column)),
            }
        } else {
            None
        };
        Ok(Statement::Receive { waitfor, top, columns, queue, filter, timeout: None })
    }

    fn get_group(&mut self, waitfor: bool) -> Result<Statement, TsqlError> {
        self.kw("GET")?;
        self.kw("CONVERSATION")?;
        self.kw("GROUP")?;
        let var = self.var()?;
        self.kw("FROM")?;
        let queue = self.name()?;
        Ok(Statement::GetConversationGroup { waitfor, var, queue, timeout: None })
    }

    fn begin_dialog(&mut self) -> Result<Statement, TsqlError> {
        let _ = self.eat_kw("CONVERSATION");
        let handle_var = self.var()?;
        self.kw("FROM")?;
        self.kw("SERVICE")?;
        let from_service = self.name()?;
        self.kw("TO")?;
        self.kw("SERVICE")?;
        let to_service = self.value()?;
        if self.eat_punct(',') {
            return Err(unsupported("BEGIN DIALOG … TO SERVICE with a broker instance"));
        }
        self.kw("ON")?;
        self.kw("CONTRACT")?;
        let contract = self.name()?;
        let (mut related_group, mut lifetime, mut encryption) = (None, None, None);
        if self.eat_kw("WITH") {
            loop {
                if self.eat_kw("RELATED_CONVERSATION_GROUP") {
                    self.punct('=')?;
                    related_group = Some(self.value()?);
                } else if self.eat_kw("RELATED_CONVERSATION") {
                    return Err(unsupported("RELATED_CONVERSATION"));
                } else if self.eat_kw("LIFETIME") {
                    self.punct('=')?;
                    lifetime = Some(self.value()?);
                } else if self.eat_kw("ENCRYPTION") {
                    self.punct('=')?;
                    encryption = Some(if self.eat_kw("ON") {
                        true
                    } else {
                        self.kw("OFF")?;
                        false
                    });
                } else {
                    return Err(syntax(&self.near()));
                }
                if !self.eat_punct(',') {
                    break;
                }
            }
        }
        Ok(Statement::BeginDialog {
            handle_var,
            from_service,
            to_service,
            contract,
            related_group,
            lifetime,
            encryption,
        })
    }
}

/// Parses a batch into its statements.
pub fn parse_batch(sql: &str) -> Result<Vec<Statement>, TsqlError> {
    let mut p = Parser { toks: lex(sql)?, at: 0 };
    let mut out = Vec::new();
    p.end_of_statement();
    while p.peek().is_some() {
        out.push(p.statement()?);
        p.end_of_statement();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> Statement {
        let mut v = parse_batch(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(v.len(), 1, "{sql}: {v:?}");
        v.remove(0)
    }

    #[test]
    fn receive_in_every_documented_shape() {
        let s = one("waitfor ( receive top (@P1) conversation_handle, message_body FROM [dbo].[q] ), timeout 500;");
        assert_eq!(
            s,
            Statement::Receive {
                waitfor: true,
                top: Some(Value::Var("@p1".into())),
                columns: vec!["conversation_handle".into(), "message_body".into()],
                queue: "dbo.q".into(),
                filter: None,
                timeout: Some(Value::Int(500)),
            }
        );
        match one("RECEIVE * FROM q WHERE conversation_group_id = @g") {
            Statement::Receive { waitfor: false, columns, filter: Some(Filter::Group(Value::Var(g))), .. } => {
                assert_eq!((columns, g), (vec!["*".to_owned()], "@g".to_owned()));
            }
            other => panic!("{other:?}"),
        }
        // Comments anywhere; column aliases; but no column expressions (the worker reads
        // message_body as it is).
        assert!(matches!(
            one("/* a */ WAITFOR (RECEIVE TOP (1) message_body AS b -- c\n FROM q)"),
            Statement::Receive { .. }
        ));
        assert_eq!(parse_batch("RECEIVE CAST(message_body AS xml) FROM q").unwrap_err().number, 102);
    }

    #[test]
    fn the_rest_of_the_statement_set() {
        assert!(matches!(
            one(
                "BEGIN DIALOG CONVERSATION @h FROM SERVICE [/a] TO SERVICE N'/b' ON CONTRACT [/c] WITH RELATED_CONVERSATION_GROUP = @g, LIFETIME = 60, ENCRYPTION = OFF"
            ),
            Statement::BeginDialog {
                related_group: Some(Value::Var(_)),
                lifetime: Some(Value::Int(60)),
                encryption: Some(false),
                ..
            }
        ));
        assert_eq!(
            one("SEND ON CONVERSATION @h MESSAGE TYPE [/x/Vraag] (@body)"),
            Statement::Send {
                handle: Value::Var("@h".into()),
                message_type: Some("/x/Vraag".into()),
                body: Some(Value::Var("@body".into()))
            }
        );
        assert_eq!(
            one("end conversation @h with error = 50001 description = 'it''s wrong'"),
            Statement::EndConversation {
                handle: Value::Var("@h".into()),
                error: Some((Value::Int(50001), Value::Str("it's wrong".into()))),
                cleanup: false
            }
        );
        assert!(matches!(one("END CONVERSATION @h WITH CLEANUP"), Statement::EndConversation { cleanup: true, .. }));
        assert!(matches!(one("MOVE CONVERSATION @h TO @g"), Statement::MoveConversation { .. }));
        assert!(matches!(
            one("WAITFOR (GET CONVERSATION GROUP @g FROM q), TIMEOUT @t"),
            Statement::GetConversationGroup { waitfor: true, timeout: Some(_), .. }
        ));
        assert_eq!(one("BEGIN TRAN"), Statement::Transaction(Tran::Begin));
        assert_eq!(one("commit transaction;"), Statement::Transaction(Tran::Commit));
        assert_eq!(parse_batch("SET XACT_ABORT ON\nSET NOCOUNT OFF;").unwrap().len(), 2);
        assert!(matches!(one("DECLARE @h uniqueidentifier"), Statement::Declare { .. }));
        assert!(
            matches!(one("EXEC sbworker.tel_pogingen @queue = @P1, @sleutels = N'[]'"), Statement::Exec { args, .. } if args.len() == 2)
        );
    }

    #[test]
    fn anything_else_is_refused_clearly() {
        let e = parse_batch("SELECT * FROM sys.tables").unwrap_err();
        assert_eq!(e.number, NOT_SUPPORTED);
        assert!(e.message.contains("SELECT is not supported by the emulator"), "{e}");
        assert_eq!(parse_batch("SEND ON @h").unwrap_err().number, 102);
        assert_eq!(parse_batch("RECEIVE * FROM q INTO @t").unwrap_err().number, NOT_SUPPORTED);
        assert_eq!(parse_batch("SET ANSI_NULLS ON").unwrap_err().number, NOT_SUPPORTED);
        assert_eq!(parse_batch("END CONVERSATION @h WITH ERROR = 1").unwrap_err().number, 102);
        assert_eq!(parse_batch("SELECT 'open").unwrap_err().number, 105);
    }

    #[test]
    fn every_statement_the_worker_sends_is_recognised() {
        for (name, sql) in crate::broker::mssql::statements_as_sent() {
            let parsed = parse_batch(&sql).unwrap_or_else(|e| panic!("{name}: {e}\n{sql}"));
            assert!(!parsed.is_empty(), "{name}");
        }
    }
}
