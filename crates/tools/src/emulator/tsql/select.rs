//! `SELECT`: its columns (variables, literals, functions, CASE), its table, its
//! conditions and operands.

use super::{Case, Column, Condition, Operand, Parser, Statement, Tok, TsqlError, syntax, unsupported};

impl Parser {
    /// `SELECT * | column [, …] FROM @t`, `SELECT COUNT(*) FROM queue`, `SELECT … FROM
    /// sys.conversation_endpoints WHERE conversation_handle = …`: the SELECTs from a table
    /// the emulator runs.
    pub(super) fn select_table(&mut self) -> Result<Statement, TsqlError> {
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
                // Valid T-SQL the emulator does not run: said so, not a syntax error.
                if !self.eat_kw("WHERE") {
                    return Err(unsupported("sys.conversation_endpoints without WHERE conversation_handle = …"));
                }
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
    pub(super) fn condition(&mut self) -> Result<Condition, TsqlError> {
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
        if self.eat_punct('>') {
            return Ok(Condition::Greater(a, self.value()?));
        }
        Err(unsupported(&format!("an IF condition near '{}'", self.near())))
    }

    /// One item of a RECEIVE column list: `*`, `c`, `c [AS] alias`, `alias = c`, `@v = c`,
    /// with `c` a queue column or `CAST(col AS type)` / `CONVERT(type, col)`.
    pub(super) fn column(&mut self) -> Result<Column, TsqlError> {
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
                Some(Tok::Word(w) | Tok::Quoted(w) | Tok::Str(w) | Tok::AnsiStr(w)) => alias = Some(w),
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
                    Some(Tok::Str(s) | Tok::AnsiStr(s)) => {
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
    pub(super) fn operand(&mut self) -> Result<Operand, TsqlError> {
        let is_literal = |t: Option<&Tok>| {
            matches!(t, Some(Tok::Str(_) | Tok::AnsiStr(_) | Tok::Int(_) | Tok::Var(_)))
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
}
