//! The emulator's T-SQL recogniser: a batch of text into [`Statement`]s. It knows the
//! Service Broker statements (`[WAITFOR (] RECEIVE …`, `GET CONVERSATION GROUP`, `BEGIN
//! DIALOG`, `SEND`, `END CONVERSATION`, `MOVE CONVERSATION`), transactions, `SET
//! XACT_ABORT|NOCOUNT` and the ANSI options at their standard values, `DECLARE`, `SET @v =`, and `EXEC` of a procedure with named
//! arguments; keywords in any case, `[bracketed]` names, `--` and `/* */` comments,
//! optional semicolons. Anything else is refused: error 102 for what is not T-SQL, a
//! "not supported by the emulator" error (severity 16) for T-SQL it does not run.
//!
//! Layout: the statements' types and [`parse_batch`] here; `lex` (the tokens),
//! `parser` (the token helpers and the dispatch by a statement's first words), then
//! the statement families: `broker` (RECEIVE, GET CONVERSATION GROUP, BEGIN DIALOG,
//! ALTER QUEUE) and `select` (SELECT with its columns, conditions and operands).

mod broker;
mod lex;
mod parser;
mod select;
#[cfg(test)]
mod tests;

use lex::{Tok, lex};

/// A value in a statement: a variable or parameter, or a literal.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Var(String),
    Int(i64),
    /// `N'…'`.
    Str(String),
    /// `'…'`: varchar.
    AnsiStr(String),
    /// `0x…`.
    Bin(Vec<u8>),
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
    /// `BEGIN CONVERSATION TIMER (handle) TIMEOUT = seconds`.
    BeginConversationTimer {
        handle: Value,
        timeout: Value,
    },
    Transaction(Tran),
    SetOption {
        option: String,
        on: bool,
    },
    /// A session setting taken at the one value the emulator behaves as (`SET
    /// LANGUAGE us_english`, `SET TEXTSIZE 2147483647`, …): nothing to do.
    SetSession {
        option: String,
        value: String,
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
    /// `EXEC sp_executesql N'statements', N'@a int, …', @a = value, …` written in a batch
    /// (as scripts and ORMs send it): the statements run with the named parameters as
    /// their variables. (Its declaration is not needed: each value keeps its own type.)
    ExecSql {
        statement: Value,
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
    /// `ALTER QUEUE q WITH [STATUS = ON|OFF] [,] [POISON_MESSAGE_HANDLING (STATUS = ON|OFF)]
    /// [,] [ACTIVATION ([STATUS = OFF,] MAX_QUEUE_READERS = n)]`.
    AlterQueue {
        queue: String,
        enabled: Option<bool>,
        poison_handling: Option<bool>,
        max_readers: Option<i32>,
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

/// The condition of an IF: `a = b`, `a <> b` (or `!=`), `a > b` (integers), `a IS [NOT]
/// NULL`.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    Equal(Value, Value),
    NotEqual(Value, Value),
    Greater(Value, Value),
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

struct Parser {
    toks: Vec<Tok>,
    at: usize,
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
