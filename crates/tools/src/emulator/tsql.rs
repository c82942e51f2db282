//! The emulator's T-SQL recogniser: a batch of text into [`Statement`]s. It knows the
//! Service Broker statements (`[WAITFOR (] RECEIVE …`, `GET CONVERSATION GROUP`, `BEGIN
//! DIALOG`, `SEND`, `END CONVERSATION`, `MOVE CONVERSATION`), transactions, `SET
//! XACT_ABORT|NOCOUNT` and the ANSI options at their standard values, `DECLARE`, `SET @v =`, and `EXEC` of a procedure with named
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
    /// `CAST(value AS type)` or `CONVERT(type, value[, style])`: the type lower case.
    Cast(Box<Value>, String),
}

/// One item of a RECEIVE's column list.
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    /// `*`: every queue column.
    Star,
    /// A queue column, perhaps converted, renamed or read into a variable.
    Item {
        /// The queue column's name, lower case.
        source: String,
        /// `CAST(c AS t)` / `CONVERT(t, c)`: the target type, lower case (`xml`, `varbinary(max)`).
        cast: Option<String>,
        /// `c AS alias`, `c alias` or `alias = c`.
        alias: Option<String>,
        /// `@v = c`: the value goes into a variable (the last row's, as in SQL Server).
        var: Option<String>,
    },
    /// `CASE WHEN … END [AS alias]`.
    Case(Case),
}

/// A searched `CASE WHEN column = literal THEN operand … [ELSE operand] END [AS alias]`
/// in a RECEIVE's column list (the RECEIVE reference page's examples).
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// (queue column, literal it equals, what the CASE gives then).
    pub whens: Vec<(String, Value, Operand)>,
    pub otherwise: Option<Operand>,
    pub alias: Option<String>,
}

/// A value a CASE gives: a queue column or a literal, perhaps cast.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    Column { source: String, cast: Option<String> },
    Literal { value: Value, cast: Option<String> },
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
        columns: Vec<Column>,
        queue: String,
        filter: Option<Filter>,
        timeout: Option<Value>,
        /// `INTO @table`: the rows go into a table variable, no result set.
        into: Option<String>,
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
        /// One conversation, or several: `ON CONVERSATION (@a, @b)`.
        handles: Vec<Value>,
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
    /// `DECLARE @a type [= value], @b type …`.
    Declare(Vec<Declared>),
    SetVar {
        var: String,
        value: Value,
    },
    Exec {
        procedure: String,
        args: Vec<(String, Value)>,
    },
    /// `SELECT @a [AS x], N'text', 1`: variables' and literals' values as one row (with
    /// the column names).
    SelectVars(Vec<(Value, Option<String>)>),
    /// `DECLARE @t TABLE (column type, …)`: the columns' names and types, lower case.
    DeclareTable {
        var: String,
        columns: Vec<(String, String)>,
    },
    /// `SELECT * | column, … FROM @t`.
    SelectTable {
        columns: Option<Vec<String>>,
        table: String,
    },
    /// `SELECT COUNT(*) [AS n] FROM queue [WITH (READPAST)]`: the messages waiting.
    CountQueue {
        queue: String,
        alias: Option<String>,
    },
    /// `SELECT * | column, … FROM sys.conversation_endpoints WHERE conversation_handle = v`.
    SelectEndpoint {
        columns: Option<Vec<String>>,
        handle: Value,
    },
    /// `ALTER QUEUE q WITH [STATUS = ON|OFF] [,] [POISON_MESSAGE_HANDLING (STATUS = ON|OFF)]`.
    AlterQueue {
        queue: String,
        enabled: Option<bool>,
        poison_handling: Option<bool>,
    },
    /// `IF condition statement-or-block [ELSE statement-or-block]`.
    If {
        condition: Condition,
        then: Box<Statement>,
        otherwise: Option<Box<Statement>>,
    },
    /// `BEGIN … END`: statements run in order.
    Block(Vec<Statement>),
    /// `SELECT @a = value, @b = value`: assignments, no result set.
    AssignVars(Vec<(String, Value)>),
}

/// The condition of an IF: `a = b`, `a <> b` (or `!=`), `a IS [NOT] NULL`.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    Equal(Value, Value),
    NotEqual(Value, Value),
    IsNull(Value),
    IsNotNull(Value),
}

/// One variable of a DECLARE.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    pub var: String,
    /// Lower case: `uniqueidentifier`, `nvarchar(256)`.
    pub ty: String,
    pub value: Option<Value>,
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
        } else if "(),.=;*<>!".contains(c) {
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
            // The ANSI options are taken at the value the emulator behaves as (that of
            // the scripts and the transport); another value is refused, never ignored.
            let fixed = match option.as_str() {
                "XACT_ABORT" | "NOCOUNT" => None,
                "ANSI_NULLS"
                | "ANSI_PADDING"
                | "ANSI_WARNINGS"
                | "ARITHABORT"
                | "CONCAT_NULL_YIELDS_NULL"
                | "QUOTED_IDENTIFIER" => Some(true),
                "NUMERIC_ROUNDABORT" => Some(false),
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
                return Err(unsupported(&format!("SET {option} {}", if on { "ON" } else { "OFF" })));
            }
            return Ok(Statement::SetOption { option, on });
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
        let values_only = |t: Option<&Tok>| matches!(t, Some(Tok::Var(_) | Tok::Str(_) | Tok::Int(_)));
        if self.is_kw("SELECT") && !values_only(self.toks.get(self.at + 1)) {
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
        let mut columns = vec![self.column()?];
        while self.eat_punct(',') {
            columns.push(self.column()?);
        }
        let assigned = columns.iter().filter(|c| matches!(c, Column::Item { var: Some(_), .. })).count();
        if assigned > 0 && assigned < columns.len() {
            return Err(TsqlError {
                number: 141,
                message: "A SELECT statement that assigns a value to a variable must not be combined with \
                          data-retrieval operations."
                    .into(),
            });
        }
        self.kw("FROM")?;
        let queue = self.name()?;
        let into = if self.eat_kw("INTO") { Some(self.var()?) } else { None };
        if into.is_some() && columns.iter().any(|c| matches!(c, Column::Item { var: Some(_), .. })) {
            return Err(syntax("INTO"));
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
        Ok(Statement::Receive { waitfor, top, columns, queue, filter, timeout: None, into })
    }

    /// A column name or alias: a name or a string.
    fn alias(&mut self) -> Result<String, TsqlError> {
        match self.peek().cloned() {
            Some(Tok::Str(s)) => {
                self.at += 1;
                Ok(s)
            }
            _ => self.name(),
        }
    }

    /// `(column type [NULL | NOT NULL], …)` of `DECLARE @t TABLE`.
    fn table_columns(&mut self, var: String) -> Result<Statement, TsqlError> {
        self.punct('(')?;
        let mut columns = Vec::new();
        loop {
            let name = self.name()?.to_lowercase();
            let ty = self.type_name()?;
            if self.eat_kw("NOT") {
                self.kw("NULL")?;
            } else {
                let _ = self.eat_kw("NULL");
            }
            columns.push((name, ty));
            if !self.eat_punct(',') {
                break;
            }
        }
        self.punct(')')?;
        Ok(Statement::DeclareTable { var, columns })
    }

    /// `ON` or `OFF`.
    fn on_off(&mut self) -> Result<bool, TsqlError> {
        if self.eat_kw("ON") {
            Ok(true)
        } else if self.eat_kw("OFF") {
            Ok(false)
        } else {
            Err(syntax(&self.near()))
        }
    }

    /// `ALTER QUEUE q WITH …` (after ALTER QUEUE): the queue's status and its poison
    /// message handling; the other settings and actions are refused.
    fn alter_queue(&mut self) -> Result<Statement, TsqlError> {
        let queue = self.name()?;
        if !self.eat_kw("WITH") {
            return Err(unsupported(&format!("ALTER QUEUE … {}", self.near().to_uppercase())));
        }
        let (mut enabled, mut poison_handling) = (None, None);
        loop {
            if self.eat_kw("STATUS") {
                self.punct('=')?;
                enabled = Some(self.on_off()?);
            } else if self.eat_kw("POISON_MESSAGE_HANDLING") {
                self.punct('(')?;
                self.kw("STATUS")?;
                self.punct('=')?;
                poison_handling = Some(self.on_off()?);
                self.punct(')')?;
            } else if self.is_kw("RETENTION") || self.is_kw("ACTIVATION") {
                return Err(unsupported(&format!("ALTER QUEUE … {}", self.near().to_uppercase())));
            } else {
                return Err(syntax(&self.near()));
            }
            // Settings are separated by an optional comma.
            let _ = self.eat_punct(',');
            if !["STATUS", "POISON_MESSAGE_HANDLING", "RETENTION", "ACTIVATION"].iter().any(|k| self.is_kw(k)) {
                break;
            }
        }
        Ok(Statement::AlterQueue { queue, enabled, poison_handling })
    }

    /// `SELECT * | column [, …] FROM @t`, `SELECT COUNT(*) FROM queue`, `SELECT … FROM
    /// sys.conversation_endpoints WHERE conversation_handle = …`: the SELECTs from a table
    /// the emulator runs.
    fn select_table(&mut self) -> Result<Statement, TsqlError> {
        self.kw("SELECT")?;
        if !matches!(self.peek(), Some(Tok::Punct('*') | Tok::Word(_) | Tok::Quoted(_))) {
            return Err(unsupported("SELECT beyond variables, values and table variables"));
        }
        if self.is_kw("COUNT") && self.toks.get(self.at + 1) == Some(&Tok::Punct('(')) {
            self.at += 2;
            self.punct('*')?;
            self.punct(')')?;
            let alias = if self.eat_kw("AS") { Some(self.alias()?) } else { None };
            self.kw("FROM")?;
            let queue = self.name()?;
            if self.eat_kw("WITH") {
                self.punct('(')?;
                if !self.eat_kw("READPAST") {
                    return Err(unsupported(&format!("the table hint {}", self.near().to_uppercase())));
                }
                self.punct(')')?;
            }
            if self.is_kw("WHERE") {
                return Err(unsupported("SELECT COUNT(*) FROM a queue with WHERE"));
            }
            return Ok(Statement::CountQueue { queue, alias });
        }
        let columns = if self.eat_punct('*') {
            None
        } else {
            let mut c = vec![self.name()?.to_lowercase()];
            while self.eat_punct(',') {
                c.push(self.name()?.to_lowercase());
            }
            Some(c)
        };
        if !self.eat_kw("FROM") {
            return Err(unsupported("SELECT beyond variables, values and table variables"));
        }
        let table = match self.peek().cloned() {
            Some(Tok::Var(v)) => {
                self.at += 1;
                v
            }
            Some(Tok::Word(_) | Tok::Quoted(_)) => {
                let name = self.name()?;
                if !name.eq_ignore_ascii_case("sys.conversation_endpoints") {
                    return Err(unsupported("SELECT from a table other than a table variable"));
                }
                self.kw("WHERE")?;
                if !self.name()?.eq_ignore_ascii_case("conversation_handle") {
                    return Err(unsupported("sys.conversation_endpoints filtered on another column"));
                }
                self.punct('=')?;
                let handle = self.value()?;
                return Ok(Statement::SelectEndpoint { columns, handle });
            }
            _ => return Err(unsupported("SELECT from a table other than a table variable")),
        };
        if self.is_kw("WHERE") || self.is_kw("ORDER") || self.is_kw("JOIN") {
            return Err(unsupported("SELECT … FROM @t with a clause"));
        }
        Ok(Statement::SelectTable { columns, table })
    }

    /// An IF's condition.
    fn condition(&mut self) -> Result<Condition, TsqlError> {
        let a = self.value()?;
        if self.eat_kw("IS") {
            let not = self.eat_kw("NOT");
            self.kw("NULL")?;
            return Ok(if not { Condition::IsNotNull(a) } else { Condition::IsNull(a) });
        }
        if self.eat_punct('=') {
            return Ok(Condition::Equal(a, self.value()?));
        }
        if (self.eat_punct('<') && self.eat_punct('>')) || (self.eat_punct('!') && self.eat_punct('=')) {
            return Ok(Condition::NotEqual(a, self.value()?));
        }
        Err(unsupported(&format!("an IF condition near '{}'", self.near())))
    }

    /// One item of a RECEIVE column list: `*`, `c`, `c [AS] alias`, `alias = c`, `@v = c`,
    /// with `c` a queue column or `CAST(col AS type)` / `CONVERT(type, col)`.
    fn column(&mut self) -> Result<Column, TsqlError> {
        if self.eat_punct('*') {
            return Ok(Column::Star);
        }
        if self.eat_kw("CASE") {
            let mut whens = Vec::new();
            while self.eat_kw("WHEN") {
                let column = self.name()?.to_lowercase();
                let column = column.rsplit('.').next().unwrap_or(&column).to_owned();
                self.punct('=')?;
                let equals = self.value()?;
                self.kw("THEN")?;
                whens.push((column, equals, self.operand()?));
            }
            if whens.is_empty() {
                return Err(unsupported("CASE without WHEN (a simple CASE)"));
            }
            let otherwise = if self.eat_kw("ELSE") { Some(self.operand()?) } else { None };
            self.kw("END")?;
            let alias = if self.eat_kw("AS") {
                Some(self.alias()?)
            } else if matches!(self.peek(), Some(Tok::Quoted(_)))
                || matches!(self.peek(), Some(Tok::Word(w)) if !w.eq_ignore_ascii_case("FROM"))
            {
                Some(self.name()?)
            } else {
                None
            };
            return Ok(Column::Case(Case { whens, otherwise, alias }));
        }
        let (mut alias, mut var) = (None, None);
        if self.toks.get(self.at + 1) == Some(&Tok::Punct('=')) {
            match self.peek().cloned() {
                Some(Tok::Var(v)) => var = Some(v),
                Some(Tok::Word(w)) | Some(Tok::Quoted(w)) | Some(Tok::Str(w)) => alias = Some(w),
                _ => return Err(syntax(&self.near())),
            }
            self.at += 2;
        }
        let (source, cast) = if self.eat_kw("CAST") {
            self.punct('(')?;
            let c = self.name()?;
            self.kw("AS")?;
            let t = self.type_name()?;
            self.punct(')')?;
            (c, Some(t))
        } else if self.eat_kw("CONVERT") {
            self.punct('(')?;
            let t = self.type_name()?;
            self.punct(',')?;
            let c = self.name()?;
            if self.eat_punct(',') {
                return Err(unsupported("CONVERT with a style"));
            }
            self.punct(')')?;
            (c, Some(t))
        } else {
            (self.name()?, None)
        };
        if alias.is_none() && var.is_none() {
            if self.eat_kw("AS") {
                alias = Some(match self.peek().cloned() {
                    Some(Tok::Str(s)) => {
                        self.at += 1;
                        s
                    }
                    _ => self.name()?,
                });
            } else if matches!(self.peek(), Some(Tok::Quoted(_)))
                || matches!(self.peek(), Some(Tok::Word(w)) if !w.eq_ignore_ascii_case("FROM"))
            {
                alias = Some(self.name()?);
            }
        }
        // A column of the queue may be written with its table: `q.message_body`.
        let source = source.rsplit('.').next().unwrap_or(&source).to_lowercase();
        Ok(Column::Item { source, cast, alias, var })
    }

    /// What a CASE gives: a queue column, a literal, `NULL`, or either in `CAST(… AS type)`.
    fn operand(&mut self) -> Result<Operand, TsqlError> {
        let is_literal = |t: Option<&Tok>| {
            matches!(t, Some(Tok::Str(_) | Tok::Int(_) | Tok::Var(_)))
                || matches!(t, Some(Tok::Word(w)) if w.eq_ignore_ascii_case("NULL"))
        };
        if self.is_kw("CAST") && self.toks.get(self.at + 1) == Some(&Tok::Punct('(')) {
            self.at += 2;
            let inner_literal = is_literal(self.peek());
            let (value, source) = if inner_literal { (Some(self.value()?), None) } else { (None, Some(self.name()?)) };
            self.kw("AS")?;
            let cast = Some(self.type_name()?);
            self.punct(')')?;
            return Ok(match (value, source) {
                (Some(value), _) => Operand::Literal { value, cast },
                (_, Some(source)) => Operand::Column { source: source.to_lowercase(), cast },
                _ => unreachable!("one of them"),
            });
        }
        if is_literal(self.peek()) {
            return Ok(Operand::Literal { value: self.value()?, cast: None });
        }
        let source = self.name()?.to_lowercase();
        Ok(Operand::Column { source: source.rsplit('.').next().unwrap_or(&source).to_owned(), cast: None })
    }

    /// A type name: `xml`, `varbinary(max)`, `nvarchar(100)`, lower case.
    fn type_name(&mut self) -> Result<String, TsqlError> {
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
                columns: vec![item("conversation_handle"), item("message_body")],
                queue: "dbo.q".into(),
                filter: None,
                timeout: Some(Value::Int(500)),
                into: None,
            }
        );
        match one("RECEIVE * FROM q WHERE conversation_group_id = @g") {
            Statement::Receive { waitfor: false, columns, filter: Some(Filter::Group(Value::Var(g))), .. } => {
                assert_eq!((columns, g), (vec![Column::Star], "@g".to_owned()));
            }
            other => panic!("{other:?}"),
        }
        // Comments anywhere; aliases in every documented form; conversions; variables.
        match one("/* a */ WAITFOR (RECEIVE TOP (1) message_body AS b -- c\n FROM q)") {
            Statement::Receive { columns, .. } => assert_eq!(columns, [aliased("message_body", "b")]),
            other => panic!("{other:?}"),
        }
        match one(
            "RECEIVE x = [message_type_name], q.conversation_handle h, CAST(message_body AS XML) AS body, CONVERT(xml, message_body) FROM q",
        ) {
            Statement::Receive { columns, .. } => assert_eq!(
                columns,
                [
                    aliased("message_type_name", "x"),
                    aliased("conversation_handle", "h"),
                    Column::Item {
                        source: "message_body".into(),
                        cast: Some("xml".into()),
                        alias: Some("body".into()),
                        var: None
                    },
                    Column::Item { source: "message_body".into(), cast: Some("xml".into()), alias: None, var: None },
                ]
            ),
            other => panic!("{other:?}"),
        }
        match one("RECEIVE TOP(1) @h = conversation_handle, @b = message_body FROM q") {
            Statement::Receive { columns, .. } => {
                assert!(columns.iter().all(|c| matches!(c, Column::Item { var: Some(_), .. })), "{columns:?}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(parse_batch("RECEIVE @h = conversation_handle, message_body FROM q").unwrap_err().number, 141);
        assert_eq!(parse_batch("RECEIVE message_body + 1 FROM q").unwrap_err().number, 102);
    }

    fn item(c: &str) -> Column {
        Column::Item { source: c.into(), cast: None, alias: None, var: None }
    }

    fn aliased(c: &str, a: &str) -> Column {
        Column::Item { source: c.into(), cast: None, alias: Some(a.into()), var: None }
    }

    /// Every combination of a statement's optional clauses, each written in several
    /// spellings (case, brackets, comments, line breaks, semicolons), parses to the
    /// same statement.
    fn each_spelling(parts: &[&[&str]], check: impl Fn(&str, &Statement)) {
        let mut texts = vec![String::new()];
        for alternatives in parts {
            texts = texts.iter().flat_map(|t| alternatives.iter().map(move |a| format!("{t} {a}"))).collect();
        }
        for t in &mut texts {
            if t.trim_start().starts_with("WAITFOR") {
                t.push_str(" )");
            }
        }
        for t in &texts {
            for shape in
                [t.clone(), t.to_lowercase(), format!("/* x */{}\n;", t.replace(' ', "\n  ")), format!(";;{t} -- end")]
            {
                let s = parse_batch(&shape).unwrap_or_else(|e| panic!("{shape}: {e}"));
                assert_eq!(s.len(), 1, "{shape}");
                check(t, &s[0]);
            }
        }
    }

    #[test]
    fn every_documented_form_with_and_without_each_clause() {
        let mut seen = 0;
        each_spelling(
            &[
                &["RECEIVE", "WAITFOR ( RECEIVE", "WAITFOR(RECEIVE"],
                &["", "TOP (5)", "TOP(@n)"],
                &["*", "conversation_handle, message_body", "[message_type_name] AS t"],
                &["FROM q", "FROM [dbo].[q]", "FROM db.dbo.q"],
                &["", "WHERE conversation_group_id = @g", "WHERE conversation_handle=@h"],
            ],
            |text, s| {
                let Statement::Receive { waitfor, top, queue, filter, .. } = s else { panic!("{text}: {s:?}") };
                assert_eq!(*waitfor, text.to_uppercase().contains("WAITFOR"), "{text}");
                assert_eq!(top.is_some(), text.to_uppercase().contains("TOP"), "{text}");
                assert!(queue.ends_with('q'), "{text}");
                assert_eq!(filter.is_some(), text.to_uppercase().contains("WHERE"), "{text}");
            },
        );
        // A WAITFOR needs its closing parenthesis, then an optional TIMEOUT.
        for (tail, timeout) in [(")", false), ("), TIMEOUT 100", true), (") ,timeout @t", true)] {
            for head in ["WAITFOR (RECEIVE * FROM q", "WAITFOR (GET CONVERSATION GROUP @g FROM [q]"] {
                let sql = format!("{head}{tail}");
                match one(&sql) {
                    Statement::Receive { timeout: t, .. } | Statement::GetConversationGroup { timeout: t, .. } => {
                        assert_eq!(t.is_some(), timeout, "{sql}")
                    }
                    other => panic!("{sql}: {other:?}"),
                }
                seen += 1;
            }
        }
        each_spelling(&[&["GET CONVERSATION GROUP @g"], &["FROM q", "FROM [dbo].[q]"]], |text, s| {
            assert!(matches!(s, Statement::GetConversationGroup { waitfor: false, .. }), "{text}")
        });
        each_spelling(
            &[
                &["BEGIN DIALOG @h", "BEGIN DIALOG CONVERSATION @h"],
                &["FROM SERVICE [//a/b]", "FROM SERVICE a"],
                &["TO SERVICE '//c/d'", "TO SERVICE N'//c/d'", "TO SERVICE @to"],
                &["ON CONTRACT [//x/c]", "ON CONTRACT c"],
                &[
                    "",
                    "WITH RELATED_CONVERSATION_GROUP = @g",
                    "WITH LIFETIME = 600",
                    "WITH ENCRYPTION = OFF",
                    "WITH RELATED_CONVERSATION_GROUP = @g, LIFETIME = @l, ENCRYPTION = OFF",
                ],
            ],
            |text, s| {
                let Statement::BeginDialog { related_group, lifetime, encryption, .. } = s else { panic!("{text}") };
                let up = text.to_uppercase();
                assert_eq!(related_group.is_some(), up.contains("RELATED_CONVERSATION_GROUP"), "{text}");
                assert_eq!(lifetime.is_some(), up.contains("LIFETIME"), "{text}");
                assert_eq!(*encryption, up.contains("ENCRYPTION").then_some(false), "{text}");
            },
        );
        each_spelling(
            &[
                &["SEND ON CONVERSATION @h", "SEND ON CONVERSATION (@h)"],
                &["", "MESSAGE TYPE [//x/Vraag]", "MESSAGE TYPE t"],
                &["", "(@body)", "( N'<a/>' )", "(NULL)"],
            ],
            |text, s| {
                let Statement::Send { message_type, body, .. } = s else { panic!("{text}") };
                assert_eq!(message_type.is_some(), text.to_uppercase().contains("MESSAGE TYPE"), "{text}");
                assert_eq!(body.is_some(), text.matches('(').count() > usize::from(text.contains("(@h)")), "{text}");
            },
        );
        each_spelling(
            &[
                &["END CONVERSATION @h"],
                &["", "WITH CLEANUP", "WITH ERROR = 50001 DESCRIPTION = 'bad'", "WITH ERROR=@e DESCRIPTION=@d"],
            ],
            |text, s| {
                let Statement::EndConversation { error, cleanup, .. } = s else { panic!("{text}") };
                let up = text.to_uppercase();
                assert_eq!(*cleanup, up.contains("CLEANUP"), "{text}");
                assert_eq!(error.is_some(), up.contains("ERROR"), "{text}");
            },
        );
        each_spelling(&[&["MOVE CONVERSATION @h", "MOVE CONVERSATION (@h)"], &["TO @g", "TO (@g)"]], |text, s| {
            assert_eq!(
                s,
                &Statement::MoveConversation { handle: Value::Var("@h".into()), group: Value::Var("@g".into()) },
                "{text}"
            );
        });
        assert!(seen > 0);
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
                handles: vec![Value::Var("@h".into())],
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
        assert_eq!(parse_batch("SET QUOTED_IDENTIFIER ON; SET NUMERIC_ROUNDABORT OFF").unwrap().len(), 2);
        assert!(parse_batch("SET QUOTED_IDENTIFIER OFF").is_err());
        assert!(parse_batch("SET ANSI_NULLS OFF").is_err());
        assert!(matches!(one("DECLARE @h uniqueidentifier"), Statement::Declare(d) if d.len() == 1));
        match one("DECLARE @t AS nvarchar(256), @n BIGINT = 5") {
            Statement::Declare(d) => assert_eq!(
                d,
                [
                    Declared { var: "@t".into(), ty: "nvarchar(256)".into(), value: None },
                    Declared { var: "@n".into(), ty: "bigint".into(), value: Some(Value::Int(5)) },
                ]
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            one("SELECT @a = @b, @c = N'x'"),
            Statement::AssignVars(vec![("@a".into(), Value::Var("@b".into())), ("@c".into(), Value::Str("x".into()))])
        );
        assert!(
            matches!(one("EXEC sbworker.count_attempts @queue = @P1, @keys = N'[]'"), Statement::Exec { args, .. } if args.len() == 2)
        );
    }

    #[test]
    fn a_body_may_be_cast_or_converted_and_a_handle_parenthesised() {
        let cast = |sql: &str| match &parse_batch(sql).unwrap()[0] {
            Statement::Send { handles, body: Some(Value::Cast(inner, ty)), .. } => {
                (handles[0].clone(), (**inner).clone(), ty.clone())
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(
            cast("SEND ON CONVERSATION (@h) MESSAGE TYPE [t] (CAST(@msg AS xml))"),
            (Value::Var("@h".into()), Value::Var("@msg".into()), "xml".into())
        );
        assert_eq!(
            cast("SEND ON CONVERSATION @h MESSAGE TYPE [t] (CONVERT(varbinary(max), N'<a/>'))"),
            (Value::Var("@h".into()), Value::Str("<a/>".into()), "varbinary(max)".into())
        );
        assert_eq!(cast("SEND ON CONVERSATION @h MESSAGE TYPE [t] (CONVERT(xml, @m, 0));").2, "xml");
    }

    #[test]
    fn case_in_a_receive_column_list_as_the_reference_page_writes_it() {
        match one("WAITFOR (RECEIVE message_type_name,
                 CASE WHEN validation = 'X' THEN CAST(message_body AS XML) ELSE CAST(N'<none/>' AS XML) END,
                 conversation_handle
             FROM ExpenseQueue INTO @receiveTable), TIMEOUT 60000")
        {
            Statement::Receive { columns, into: Some(t), .. } => {
                assert_eq!(t, "@receivetable");
                assert_eq!(
                    columns[1],
                    Column::Case(Case {
                        whens: vec![(
                            "validation".into(),
                            Value::Str("X".into()),
                            Operand::Column { source: "message_body".into(), cast: Some("xml".into()) }
                        )],
                        otherwise: Some(Operand::Literal {
                            value: Value::Str("<none/>".into()),
                            cast: Some("xml".into())
                        }),
                        alias: None,
                    })
                );
            }
            other => panic!("{other:?}"),
        }
        match one(
            "RECEIVE CASE WHEN validation = 'X' THEN CAST(message_body AS XML) ELSE NULL END AS message_body FROM q",
        ) {
            Statement::Receive { columns, .. } => {
                assert!(matches!(&columns[0], Column::Case(c) if c.alias.as_deref() == Some("message_body")))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse_batch("RECEIVE CASE validation WHEN 'X' THEN 1 END FROM q").unwrap_err().number,
            NOT_SUPPORTED
        );
    }

    #[test]
    fn queue_depth_endpoint_state_and_alter_queue() {
        assert_eq!(
            one("SELECT COUNT(*) AS n FROM dbo.q WITH (READPAST)"),
            Statement::CountQueue { queue: "dbo.q".into(), alias: Some("n".into()) }
        );
        assert_eq!(
            one("SELECT state, state_desc FROM sys.conversation_endpoints WHERE conversation_handle = @P1"),
            Statement::SelectEndpoint {
                columns: Some(vec!["state".into(), "state_desc".into()]),
                handle: Value::Var("@p1".into())
            }
        );
        assert_eq!(
            one("ALTER QUEUE [dbo].[q] WITH STATUS = ON POISON_MESSAGE_HANDLING (STATUS = OFF)"),
            Statement::AlterQueue { queue: "dbo.q".into(), enabled: Some(true), poison_handling: Some(false) }
        );
        assert_eq!(
            one("alter queue q with poison_message_handling (status = on)"),
            Statement::AlterQueue { queue: "q".into(), enabled: None, poison_handling: Some(true) }
        );
        for refused in [
            "ALTER QUEUE q WITH RETENTION = ON",
            "ALTER QUEUE q REBUILD",
            "ALTER TABLE t ADD c int",
            "SELECT COUNT(*) FROM q WITH (NOLOCK)",
            "SELECT state FROM sys.conversation_endpoints WHERE far_service = 'x'",
        ] {
            assert_eq!(parse_batch(refused).unwrap_err().number, NOT_SUPPORTED, "{refused}");
        }
    }

    #[test]
    fn send_on_several_conversations_at_once() {
        match one("SEND ON CONVERSATION (@a, @b) MESSAGE TYPE [t] (@m)") {
            Statement::Send { handles, .. } => {
                assert_eq!(handles, [Value::Var("@a".into()), Value::Var("@b".into())])
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn table_variables_if_and_blocks_as_the_reference_pages_write_them() {
        let b = parse_batch(
            "DECLARE @procTable TABLE(service_instance_id UNIQUEIDENTIFIER, handle UNIQUEIDENTIFIER NOT NULL,
                 message_body VARBINARY(MAX) NULL);
             RECEIVE TOP (1) conversation_group_id, conversation_handle, message_body FROM ExpenseQueue INTO @procTable;
             SELECT * FROM @procTable; SELECT handle, message_body FROM @procTable",
        )
        .unwrap();
        assert_eq!(
            b[0],
            Statement::DeclareTable {
                var: "@proctable".into(),
                columns: vec![
                    ("service_instance_id".into(), "uniqueidentifier".into()),
                    ("handle".into(), "uniqueidentifier".into()),
                    ("message_body".into(), "varbinary(max)".into()),
                ],
            }
        );
        assert!(matches!(&b[1], Statement::Receive { into: Some(t), .. } if t == "@proctable"));
        assert_eq!(b[2], Statement::SelectTable { columns: None, table: "@proctable".into() });
        assert_eq!(
            b[3],
            Statement::SelectTable {
                columns: Some(vec!["handle".into(), "message_body".into()]),
                table: "@proctable".into()
            }
        );
        // The tutorial's IF with a block holding END CONVERSATION; ELSE with one statement.
        let b = parse_batch(
            "IF @name = N'//AWDB/1DBSample/RequestMessage'
             BEGIN
                 DECLARE @reply NVARCHAR(100);
                 SEND ON CONVERSATION @h MESSAGE TYPE [r] (@reply);
                 END CONVERSATION @h;
             END
             ELSE END CONVERSATION @h WITH CLEANUP;
             IF @h IS NOT NULL SELECT @h AS handle",
        )
        .unwrap();
        match &b[0] {
            Statement::If { condition: Condition::Equal(Value::Var(v), Value::Str(_)), then, otherwise: Some(e) } => {
                assert_eq!(v, "@name");
                assert!(matches!(&**then, Statement::Block(body) if body.len() == 3), "{then:?}");
                assert!(matches!(&**e, Statement::EndConversation { cleanup: true, .. }));
            }
            other => panic!("{other:?}"),
        }
        match &b[1] {
            Statement::If { condition: Condition::IsNotNull(_), then, otherwise: None } => {
                assert_eq!(**then, Statement::SelectVars(vec![(Value::Var("@h".into()), Some("handle".into()))]));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn anything_else_is_refused_clearly() {
        let e = parse_batch("SELECT * FROM sys.tables").unwrap_err();
        assert_eq!(e.number, NOT_SUPPORTED);
        assert!(e.message.contains("SELECT from a table other than a table variable is not supported"), "{e}");
        assert_eq!(parse_batch("SELECT * FROM @t WHERE a = 1").unwrap_err().number, NOT_SUPPORTED);
        assert_eq!(parse_batch("SELECT name FROM sys.services").unwrap_err().number, NOT_SUPPORTED);
        assert_eq!(parse_batch("SEND ON @h").unwrap_err().number, 102);
        assert_eq!(parse_batch("RECEIVE @x = message_body FROM q INTO @t").unwrap_err().number, 102);
        assert_eq!(parse_batch("IF @a > 1 SELECT @a").unwrap_err().number, NOT_SUPPORTED);
        assert_eq!(parse_batch("IF @a = 1 BEGIN SELECT @a").unwrap_err().number, 102);
        assert_eq!(parse_batch("SET ANSI_NULLS OFF").unwrap_err().number, NOT_SUPPORTED);
        assert_eq!(parse_batch("SET DATEFORMAT dmy").unwrap_err().number, NOT_SUPPORTED);
        assert_eq!(parse_batch("SET NOCOUNT maybe").unwrap_err().number, 102);
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
