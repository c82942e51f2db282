//! The Service Broker statements with a grammar of their own: `[WAITFOR (] RECEIVE …`
//! (into a table variable too), `[WAITFOR (] GET CONVERSATION GROUP`, `BEGIN DIALOG`
//! and `ALTER QUEUE`.

use super::{Column, Filter, Parser, Statement, TsqlError, syntax, unsupported};

impl Parser {
    pub(super) fn receive(&mut self, waitfor: bool) -> Result<Statement, TsqlError> {
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

    /// `(column type [NULL | NOT NULL], …)` of `DECLARE @t TABLE`.
    pub(super) fn table_columns(&mut self, var: String) -> Result<Statement, TsqlError> {
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

    pub(super) fn get_group(&mut self, waitfor: bool) -> Result<Statement, TsqlError> {
        self.kw("GET")?;
        self.kw("CONVERSATION")?;
        self.kw("GROUP")?;
        let var = self.var()?;
        self.kw("FROM")?;
        let queue = self.name()?;
        Ok(Statement::GetConversationGroup { waitfor, var, queue, timeout: None })
    }

    pub(super) fn begin_dialog(&mut self) -> Result<Statement, TsqlError> {
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

    /// `ALTER QUEUE q WITH …` (after ALTER QUEUE): the queue's status, its poison
    /// message handling, and `ACTIVATION ([STATUS = OFF,] MAX_QUEUE_READERS = n)` (the
    /// workers' limit; the emulator activates nothing, so a procedure or STATUS = ON is
    /// refused); the other settings and actions are refused.
    pub(super) fn alter_queue(&mut self) -> Result<Statement, TsqlError> {
        let queue = self.name()?;
        if !self.eat_kw("WITH") {
            return Err(unsupported(&format!("ALTER QUEUE … {}", self.near().to_uppercase())));
        }
        let (mut enabled, mut poison_handling, mut max_readers) = (None, None, None);
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
            } else if self.eat_kw("ACTIVATION") {
                self.punct('(')?;
                loop {
                    if self.eat_kw("STATUS") {
                        self.punct('=')?;
                        if self.on_off()? {
                            return Err(unsupported("ALTER QUEUE … ACTIVATION (STATUS = ON)"));
                        }
                    } else if self.eat_kw("MAX_QUEUE_READERS") {
                        self.punct('=')?;
                        let n = self.setting_word()?;
                        let n: i32 = n.parse().ok().filter(|n| (0..=32767).contains(n)).ok_or_else(|| syntax(&n))?;
                        max_readers = Some(n);
                    } else {
                        return Err(unsupported(&format!("ALTER QUEUE … ACTIVATION ({}", self.near().to_uppercase())));
                    }
                    if !self.eat_punct(',') {
                        break;
                    }
                }
                self.punct(')')?;
            } else if self.is_kw("RETENTION") {
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
        Ok(Statement::AlterQueue { queue, enabled, poison_handling, max_readers })
    }
}
