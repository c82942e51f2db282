//! The token helpers of the recogniser, and the dispatch of a statement by its first
//! words (transactions, SET, DECLARE, EXEC, SEND, END and MOVE CONVERSATION in place;
//! the larger families in `broker` and `select`).

use super::{Declared, Parser, Statement, Tok, Tran, TsqlError, Value, syntax, unsupported};

impl Parser {
    pub(super) fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    pub(super) fn near(&self) -> String {
        self.peek().map_or_else(|| "end of batch".into(), Tok::text)
    }

    pub(super) fn is_kw(&self, kw: &str) -> bool {
        matches!(self.peek(), Some(Tok::Word(w)) if w.eq_ignore_ascii_case(kw))
    }

    pub(super) fn eat_kw(&mut self, kw: &str) -> bool {
        let yes = self.is_kw(kw);
        if yes {
            self.at += 1;
        }
        yes
    }

    pub(super) fn kw(&mut self, kw: &str) -> Result<(), TsqlError> {
        if self.eat_kw(kw) { Ok(()) } else { Err(syntax(&self.near())) }
    }

    pub(super) fn eat_punct(&mut self, p: char) -> bool {
        let yes = self.peek() == Some(&Tok::Punct(p));
        if yes {
            self.at += 1;
        }
        yes
    }

    pub(super) fn punct(&mut self, p: char) -> Result<(), TsqlError> {
        if self.eat_punct(p) { Ok(()) } else { Err(syntax(&self.near())) }
    }

    pub(super) fn var(&mut self) -> Result<String, TsqlError> {
        match self.peek().cloned() {
            Some(Tok::Var(v)) => {
                self.at += 1;
                Ok(v)
            }
            _ => Err(syntax(&self.near())),
        }
    }

    /// A name: one part or several separated by dots, brackets removed.
    pub(super) fn name(&mut self) -> Result<String, TsqlError> {
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

    pub(super) fn value(&mut self) -> Result<Value, TsqlError> {
        let v = match self.peek().cloned() {
            Some(Tok::Var(v)) => Value::Var(v),
            Some(Tok::Int(i)) => Value::Int(i),
            Some(Tok::Str(s)) => Value::Str(s),
            Some(Tok::AnsiStr(s)) => Value::AnsiStr(s),
            Some(Tok::Bin(b)) => Value::Bin(b),
            Some(Tok::Word(w)) if w.eq_ignore_ascii_case("NULL") => Value::Null,
            Some(Tok::Word(w))
                if w.eq_ignore_ascii_case("CAST") && self.toks.get(self.at + 1) == Some(&Tok::Punct('(')) =>
            {
                self.at += 2;
                let inner = self.value()?;
                self.kw("AS")?;
                let ty = self.type_name()?;
                self.punct(')')?;
                return Ok(Value::Cast(Box::new(inner), ty));
            }
            Some(Tok::Word(w))
                if w.eq_ignore_ascii_case("CONVERT") && self.toks.get(self.at + 1) == Some(&Tok::Punct('(')) =>
            {
                self.at += 2;
                let ty = self.type_name()?;
                self.punct(',')?;
                let inner = self.value()?;
                if self.eat_punct(',') {
                    // A style: only the default makes sense for the types converted here.
                    let _ = self.value()?;
                }
                self.punct(')')?;
                return Ok(Value::Cast(Box::new(inner), ty));
            }
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

    pub(super) fn end_of_statement(&mut self) {
        while self.eat_punct(';') {}
    }

    pub(super) fn statement(&mut self) -> Result<Statement, TsqlError> {
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
                Statement::Receive { waitfor, top, columns, queue, filter, into, .. } => {
                    Statement::Receive { waitfor, top, columns, queue, filter, timeout, into }
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
            if self.eat_kw("CONVERSATION") {
                self.kw("TIMER")?;
                self.punct('(')?;
                let handle = self.value()?;
                self.punct(')')?;
                self.kw("TIMEOUT")?;
                self.punct('=')?;
                let timeout = self.value()?;
                return Ok(Statement::BeginConversationTimer { handle, timeout });
            }
            if self.eat_kw("TRAN") || self.eat_kw("TRANSACTION") {
                return Ok(Statement::Transaction(Tran::Begin));
            }
            let mut body = Vec::new();
            self.end_of_statement();
            // `END` ends the block unless it begins END CONVERSATION.
            while !self.is_kw("END")
                || matches!(self.toks.get(self.at + 1), Some(Tok::Word(w)) if w.eq_ignore_ascii_case("CONVERSATION"))
            {
                if self.peek().is_none() {
                    return Err(syntax("end of batch"));
                }
                body.push(self.statement()?);
                self.end_of_statement();
            }
            self.kw("END")?;
            return Ok(Statement::Block(body));
        }
        if self.eat_kw("IF") {
            let condition = self.condition()?;
            self.end_of_statement();
            let then = Box::new(self.statement()?);
            self.end_of_statement();
            let otherwise = if self.eat_kw("ELSE") {
                self.end_of_statement();
                Some(Box::new(self.statement()?))
            } else {
                None
            };
            return Ok(Statement::If { condition, then, otherwise });
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
            let handles = if self.eat_punct('(') {
                let mut h = vec![self.value()?];
                while self.eat_punct(',') {
                    h.push(self.value()?);
                }
                self.punct(')')?;
                h
            } else {
                vec![self.value()?]
            };
            let message_type = if self.eat_kw("MESSAGE") {
                self.kw("TYPE")?;
                Some(self.name()?)
            } else {
                None
            };
            let body = if self.peek() == Some(&Tok::Punct('(')) { Some(self.value()?) } else { None };
            return Ok(Statement::Send { handles, message_type, body });
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
            return self.set_option(option);
        }
        if self.eat_kw("DECLARE") {
            let mut declared = Vec::new();
            loop {
                let var = self.var()?;
                let _ = self.eat_kw("AS");
                if self.eat_kw("TABLE") {
                    if !declared.is_empty() {
                        return Err(syntax("TABLE"));
                    }
                    return self.table_columns(var);
                }
                let ty = self.type_name()?;
                let value = if self.eat_punct('=') { Some(self.value()?) } else { None };
                declared.push(Declared { var, ty, value });
                if !self.eat_punct(',') {
                    return Ok(Statement::Declare(declared));
                }
            }
        }
        let values_only = |t: Option<&Tok>, next: Option<&Tok>| match t {
            Some(Tok::Var(_) | Tok::Str(_) | Tok::AnsiStr(_) | Tok::Int(_) | Tok::Bin(_)) => true,
            Some(Tok::Word(w)) if w.eq_ignore_ascii_case("NULL") => true,
            Some(Tok::Word(w)) => {
                (w.eq_ignore_ascii_case("CAST") || w.eq_ignore_ascii_case("CONVERT")) && next == Some(&Tok::Punct('('))
            }
            _ => false,
        };
        if self.is_kw("SELECT") && !values_only(self.toks.get(self.at + 1), self.toks.get(self.at + 2)) {
            return self.select_table();
        }
        if self.is_kw("SELECT") {
            self.at += 1;
            let assigns = self.toks.get(self.at + 1) == Some(&Tok::Punct('='));
            let (mut vars, mut assignments) = (Vec::new(), Vec::new());
            loop {
                if assigns {
                    let var = self.var()?;
                    self.punct('=')?;
                    assignments.push((var, self.value()?));
                } else {
                    let v = self.value()?;
                    let alias = if self.eat_kw("AS") { Some(self.alias()?) } else { None };
                    vars.push((v, alias));
                }
                if !self.eat_punct(',') {
                    break;
                }
            }
            if self.is_kw("FROM") || self.is_kw("WHERE") || self.peek() == Some(&Tok::Punct('=')) {
                return Err(unsupported("SELECT beyond variables and values"));
            }
            return Ok(if assigns { Statement::AssignVars(assignments) } else { Statement::SelectVars(vars) });
        }
        if self.eat_kw("ALTER") {
            if !self.eat_kw("QUEUE") {
                return Err(unsupported(&format!("ALTER {}", self.near().to_uppercase())));
            }
            return self.alter_queue();
        }
        if self.eat_kw("EXEC") || self.eat_kw("EXECUTE") {
            let procedure = self.name()?;
            let bare = procedure.rsplit('.').next().unwrap_or(&procedure).to_ascii_lowercase();
            if bare == "sp_executesql" {
                return self.exec_sql();
            }
            if matches!(self.peek(), Some(Tok::Str(_) | Tok::AnsiStr(_) | Tok::Int(_))) {
                // Positional arguments (`EXEC sp_executesql N'…', N'@a int', @a = 1`):
                // valid T-SQL the emulator does not run in a batch.
                return Err(unsupported(&format!("EXEC {procedure} with positional arguments")));
            }
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

    /// `sp_executesql`'s arguments after its name: the statements (a string or a
    /// variable), optionally the parameters' declaration, then `@name = value` for each
    /// parameter. Values by position and OUTPUT parameters are refused as not supported.
    fn exec_sql(&mut self) -> Result<Statement, TsqlError> {
        let statement = self.value()?;
        let mut args = Vec::new();
        if self.eat_punct(',') {
            // The declaration, unless the parameters start at once.
            let named =
                matches!(self.peek(), Some(Tok::Var(_))) && self.toks.get(self.at + 1) == Some(&Tok::Punct('='));
            if !named {
                let _declaration = self.value()?;
                if !self.eat_punct(',') {
                    return Ok(Statement::ExecSql { statement, args });
                }
            }
            loop {
                if !matches!(self.peek(), Some(Tok::Var(_))) {
                    return Err(unsupported("sp_executesql with parameter values by position"));
                }
                let name = self.var()?;
                self.punct('=')?;
                args.push((name, self.value()?));
                if self.is_kw("OUTPUT") || self.is_kw("OUT") {
                    return Err(unsupported("sp_executesql with OUTPUT parameters in a batch"));
                }
                if !self.eat_punct(',') {
                    break;
                }
            }
        }
        Ok(Statement::ExecSql { statement, args })
    }

    /// `SET option …` after its name: the session settings drivers send when they log in
    /// (SET statements page). The emulator does not depend on some of them (cursors,
    /// arithmetic aborts, the default nullability of new columns): those are taken at any
    /// value. The others are taken at the value the emulator behaves as (that of the
    /// scripts, the transport and SQL Server's defaults for a client that connects with
    /// ODBC or tedious); another value is refused, never ignored.
    pub(super) fn set_option(&mut self, option: String) -> Result<Statement, TsqlError> {
        let refused = |value: &str| Err(unsupported(&format!("SET {option} {value}")));
        let fixed = match option.as_str() {
            "XACT_ABORT"
            | "NOCOUNT"
            | "ARITHABORT"
            | "ARITHIGNORE"
            | "ANSI_NULL_DFLT_ON"
            | "ANSI_NULL_DFLT_OFF"
            | "CURSOR_CLOSE_ON_COMMIT" => None,
            "ANSI_NULLS" | "ANSI_PADDING" | "ANSI_WARNINGS" | "CONCAT_NULL_YIELDS_NULL" | "QUOTED_IDENTIFIER" => {
                Some(true)
            }
            "NUMERIC_ROUNDABORT" | "IMPLICIT_TRANSACTIONS" => Some(false),
            "TRANSACTION" => {
                self.kw("ISOLATION")?;
                self.kw("LEVEL")?;
                let level = self.setting_word()?;
                let level = if level == "READ" { format!("READ {}", self.setting_word()?) } else { level };
                if level != "READ COMMITTED" {
                    return Err(unsupported(&format!("SET TRANSACTION ISOLATION LEVEL {level}")));
                }
                return Ok(Statement::SetSession { option: "TRANSACTION ISOLATION LEVEL".into(), value: level });
            }
            // The value each takes, as the emulator behaves: it never truncates a value
            // (TEXTSIZE), speaks English, reads no dates and leaves deadlock victims to
            // PostgreSQL. A lock timeout (milliseconds, -1 for none) bounds a group
            // RECEIVE's wait for a group another session holds.
            "TEXTSIZE" | "LANGUAGE" | "DATEFORMAT" | "DATEFIRST" | "LOCK_TIMEOUT" | "DEADLOCK_PRIORITY" => {
                let value = self.setting_word()?;
                let ok = match option.as_str() {
                    "TEXTSIZE" => value == "2147483647" || value == "-1",
                    "LANGUAGE" => value == "US_ENGLISH" || value == "ENGLISH",
                    "DATEFORMAT" => value == "MDY",
                    "DATEFIRST" => value == "7",
                    "LOCK_TIMEOUT" => value.parse::<i64>().is_ok_and(|v| v >= -1),
                    _ => value == "NORMAL" || value == "0",
                };
                if !ok {
                    return refused(&value);
                }
                return Ok(Statement::SetSession { option, value });
            }
            _ => return Err(unsupported(&format!("SET {option}"))),
        };
        let on = if self.eat_kw("ON") {
            true
        } else if self.eat_kw("OFF") {
            false
        } else {
            return Err(syntax(&self.near()));
        };
        if fixed.is_some_and(|v| v != on) {
            return refused(if on { "ON" } else { "OFF" });
        }
        Ok(Statement::SetOption { option, on })
    }

    /// The value of a `SET` setting, upper case: a word, a `[name]`, a string
    /// (`N'us_english'`) or a number, negative ones too.
    pub(super) fn setting_word(&mut self) -> Result<String, TsqlError> {
        let negative = self.eat_punct('-');
        let word = match self.peek() {
            Some(Tok::Int(i)) if *i < 0 && !negative => i.to_string(),
            Some(Tok::Word(w) | Tok::Quoted(w) | Tok::Str(w) | Tok::AnsiStr(w)) if !negative => w.to_uppercase(),
            Some(Tok::Int(i)) => format!("{}{i}", if negative { "-" } else { "" }),
            _ => return Err(syntax(&self.near())),
        };
        self.at += 1;
        Ok(word)
    }

    /// A column name or alias: a name or a string.
    pub(super) fn alias(&mut self) -> Result<String, TsqlError> {
        match self.peek().cloned() {
            Some(Tok::Str(s) | Tok::AnsiStr(s)) => {
                self.at += 1;
                Ok(s)
            }
            _ => self.name(),
        }
    }

    /// `ON` or `OFF`.
    pub(super) fn on_off(&mut self) -> Result<bool, TsqlError> {
        if self.eat_kw("ON") {
            Ok(true)
        } else if self.eat_kw("OFF") {
            Ok(false)
        } else {
            Err(syntax(&self.near()))
        }
    }

    /// A type name: `xml`, `varbinary(max)`, `nvarchar(100)`, lower case.
    pub(super) fn type_name(&mut self) -> Result<String, TsqlError> {
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
        Ok(ty.to_lowercase())
    }
}
