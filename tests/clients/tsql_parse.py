#!/usr/bin/env python3
"""Parse-check sqlcmd scripts (broker/mssql/*.sql) with sqlfluff's T-SQL dialect.

Usage (tests/mssql_scripts.rs runs it, installing sqlfluff with pip into the build
directory; by hand):
    python3 -m pip install --target /tmp/sqlfluff sqlfluff==4.5.0
    PYTHONPATH=/tmp/sqlfluff python3 tests/clients/tsql_parse.py [-v NAME=VALUE ...] [--masked] broker/mssql/*.sql
(--masked also prints every batch as sqlfluff sees it, with its file line numbers.)

What it does, per file:
  1. sqlcmd layer: lines `:setvar NAME VALUE` define variables, every other `:command`
     line (and `!! shell` line) is blanked; `$(NAME)` is substituted (from :setvar, then
     -v, then SAMPLE_VARS below; an undefined one is an error, as in sqlcmd); a line
     `GO [count]` ends a batch. Lines inside strings and block comments are left alone.
  2. Masking: the T-SQL that sqlfluff's tsql dialect cannot parse (Service Broker
     statements and a few clauses, see STATEMENT_MASKS and CLAUSE_MASKS) is replaced by
     harmless text of the same line count, so line numbers stay right.
  3. Every batch is parsed with sqlfluff (dialect tsql, raw templater). Only parse and
     lex errors count; no lint rule is run. sqlfluff reports an error inside a
     procedure, function, trigger or IF as "the whole statement is unparsable"; the
     checker then narrows it down to the statement that breaks (see localize()).

Output: one line `file:line: message` per failing batch and exit 1; else a summary and
exit 0. Exit 2 when sqlfluff is missing or the command line is wrong.
"""

import re
import sys
import time

try:
    import sqlfluff
    from sqlfluff.core import FluffConfig, Linter
    from sqlfluff.core.errors import SQLLexError, SQLParseError
except ImportError:  # pragma: no cover
    sys.stderr.write(
        "tsql_parse: sqlfluff is not installed; run:\n"
        "  python3 -m pip install --target /tmp/sqlfluff sqlfluff==4.5.0\n"
        "and run this script with PYTHONPATH=/tmp/sqlfluff\n"
    )
    sys.exit(2)

# Sample values for the sqlcmd variables the scripts use (docs/deployment.md: -v Database=Payroll
# WorkerLogin=sbworker WorkerUser=sbworker).
SAMPLE_VARS = {"Database": "Payroll", "WorkerUser": "sbworker", "WorkerLogin": "sbworker", "Side": "both",
               # optional/endpoint.sql and optional/routes.sql (a split deployment)
               "Instance": "rooster", "Port": "4022", "MasterKeyPassword": "Sample-Password-1",
               "CertificateExpiry": "20301231", "CertificateFile": "/certs/sbworker_broker_rooster.cer",
               "FarInstance": "reken1", "FarCertificateFile": "/certs/sbworker_broker_reken1.cer",
               "CalcAddresses": "TCP://reken1:4022,TCP://reken2:4022", "RosterAddress": "TCP://rooster:4022",
               "RosterBrokerInstance": "5F1C8E2A-0000-4000-8000-000000000001"}

# ---------------------------------------------------------------------------------------
# Masks. Each pattern is matched against the batch's "code view" (comments and the
# insides of strings and quoted identifiers blanked), case-insensitively, so text in
# comments and strings never matches. Keep this list minimal: everything not masked is
# checked by sqlfluff.
# ---------------------------------------------------------------------------------------

# Whole statements sqlfluff 4.x cannot parse (checked one by one against sqlfluff 4.5.0:
# each is "Found unparsable section"). A match runs to the statement's end: the first
# `;` outside parentheses, or else the next statement's first word (ELSE in
# `IF c CREATE QUEUE .. ELSE ..`, END of a block, SELECT, ...; see statement_end()), or
# the batch's end. It is replaced by `SELECT 1` plus blanks, keeping its newlines and
# its `;`, which is valid wherever the statement was (batch, procedure body, IF/ELSE).
STATEMENT_MASKS = [
    # CREATE/ALTER/DROP MESSAGE TYPE: no such statement in sqlfluff's tsql dialect.
    ("message type", r"\b(?:CREATE|ALTER|DROP)\s+MESSAGE\s+TYPE\b"),
    # CREATE/DROP CONTRACT (there is no ALTER CONTRACT): not in the dialect.
    ("contract", r"\b(?:CREATE|DROP)\s+CONTRACT\b"),
    # CREATE/ALTER/DROP QUEUE: not in the dialect.
    ("queue", r"\b(?:CREATE|ALTER|DROP)\s+QUEUE\b"),
    # CREATE/ALTER/DROP SERVICE: not in the dialect.
    ("service", r"\b(?:CREATE|ALTER|DROP)\s+SERVICE\b"),
    # BEGIN DIALOG [CONVERSATION]: not in the dialect (only END CONVERSATION is, and is
    # therefore NOT masked).
    ("begin dialog", r"\bBEGIN\s+DIALOG\b"),
    # SEND ON CONVERSATION: not in the dialect.
    ("send", r"\bSEND\s+ON\s+CONVERSATION\b"),
    # WAITFOR (RECEIVE ...) / WAITFOR (GET CONVERSATION GROUP ...): the dialect's WAITFOR
    # knows only DELAY and TIME.
    ("waitfor receive", r"\bWAITFOR\s*\(\s*(?:RECEIVE|GET\s+CONVERSATION\s+GROUP)\b"),
    # RECEIVE as a statement (not the RECEIVE permission of GRANT/DENY/REVOKE, which is
    # followed by ON, TO or a comma): not in the dialect.
    ("receive", r"(?<![\w@#$.])RECEIVE\b(?!\s*(?:ON\b|TO\b|,))"),
    # GET CONVERSATION GROUP, BEGIN CONVERSATION TIMER, MOVE CONVERSATION: not in the
    # dialect.
    ("conversation group/timer/move",
     r"\b(?:GET\s+CONVERSATION\s+GROUP|BEGIN\s+CONVERSATION\s+TIMER|MOVE\s+CONVERSATION)\b"),
    # CREATE/ALTER/DROP BROKER PRIORITY: not in the dialect. The leading keywords run
    # through its SET, which would otherwise end the statement as a new one.
    # The transport of a split deployment (optional/endpoint.sql, optional/routes.sql):
    # CREATE/ALTER/BACKUP CERTIFICATE, CREATE/ALTER ENDPOINT and CREATE/ALTER/DROP ROUTE
    # are not in the dialect (checked against sqlfluff 4.5.0: "Found unparsable section").
    ("certificate", r"\b(?:CREATE|ALTER|BACKUP)\s+CERTIFICATE\b"),
    ("endpoint", r"\b(?:CREATE|ALTER)\s+ENDPOINT\b"),
    ("route", r"\b(?:CREATE|ALTER|DROP)\s+ROUTE\b"),
    # Event-based activation (optional/activation.sql): CREATE/DROP EVENT NOTIFICATION is
    # not in the dialect either (checked against sqlfluff 4.5.0: "Found unparsable section").
    ("event notification", r"\b(?:CREATE|DROP)\s+EVENT\s+NOTIFICATION\b"),
    ("broker priority",
     r"\b(?:(?:CREATE|ALTER)\s+BROKER\s+PRIORITY\s+\S+\s+FOR\s+CONVERSATION(?:\s+SET\b)?|DROP\s+BROKER\s+PRIORITY\b)"),
]

# Clauses sqlfluff cannot parse inside statements it otherwise parses. Each is rewritten
# in place (see mask_clauses()), the rest of the statement is still checked.
CLAUSE_MASKS = [
    # GRANT/DENY/REVOKE ... ON SERVICE:: | CONTRACT:: | MESSAGE TYPE:: | ROUTE:: |
    # REMOTE SERVICE BINDING:: | ENDPOINT::  -- the dialect's securable classes lack the
    # Service Broker ones and ENDPOINT; the class word becomes OBJECT (OBJECT::[/a/b] parses
    # the same way).
    ("securable class", r"\bON\s+(SERVICE|CONTRACT|MESSAGE\s+TYPE|ROUTE|REMOTE\s+SERVICE\s+BINDING|ENDPOINT)(?=\s*::)"),
    # WITH XMLNAMESPACES (...): the dialect has no XMLNAMESPACES clause at all (neither
    # DEFAULT 'uri' nor 'uri' AS prefix); the clause up to its closing parenthesis is
    # blanked, the SELECT/INSERT/UPDATE after it is still checked.
    ("with xmlnamespaces", r"\bWITH\s+XMLNAMESPACES\s*\("),
    # EXECUTE AS N'user' in a module's WITH clause: the dialect accepts only '...' there;
    # SQL Server accepts N'...' (its own sp_helpdiagrams uses WITH EXECUTE AS N'dbo').
    # The N is blanked.
    ("execute as N'", r"\bEXEC(?:UTE)?\s+AS\s+(N)'"),
    # FOR JSON / FOR XML after a UNION/EXCEPT/INTERSECT: the dialect allows the FOR clause
    # only after a single SELECT, but T-SQL's <SELECT statement> puts it after the whole
    # <query_expression> (SELECT docs: query_expression [ORDER BY] [FOR clause]). Blanked
    # only when its query has a set operator. That is valid only at a statement's top
    # level: inside parentheses (subquery, derived table, inline function) SQL Server
    # refuses it (Msg 1086), so there the checker reports an error itself.
    ("for json/xml after set operator", r"\bFOR\s+(?:JSON|XML)\b"),
]

# The statements that T-SQL requires to follow a `;` (or to be first in the batch or
# module): the docs of SEND and RECEIVE ("If the SEND statement isn't the first statement
# in a batch or stored procedure, the preceding statement must be terminated with a
# semicolon") and of WITH common_table_expression, which SQL Server applies to WITH
# XMLNAMESPACES too (Msg 319: "If this statement is a common table expression, an
# xmlnamespaces clause or a change tracking context clause, the previous statement must
# be terminated with a semicolon"). sqlfluff cannot check them (they are masked), so the
# checker does, conservatively: after `;`, batch start, BEGIN [TRY|CATCH], ELSE, a
# module's AS, or as the body of IF/WHILE counts as terminated; after a block's END
# (END, END TRY, END CATCH) it does not: the IF/WHILE/BEGIN..END before is a statement
# not followed by `;`.
NEEDS_SEMICOLON_BEFORE = {"send", "receive", "waitfor receive", "with xmlnamespaces"}

FOR_CLAUSE_WORDS = {
    "PATH", "AUTO", "RAW", "EXPLICIT", "ROOT", "TYPE", "ELEMENTS", "XSINIL", "ABSENT",
    "XMLDATA", "XMLSCHEMA", "BINARY", "BASE64", "INCLUDE_NULL_VALUES", "WITHOUT_ARRAY_WRAPPER",
}
NOT_BLOCK_AFTER_BEGIN = {"TRAN", "TRANSACTION", "DISTRIBUTED", "DIALOG", "CONVERSATION"}


# ---------------------------------------------------------------------------------------
# Lexing: a code view of the text, same length, with comments blanked, and the insides of
# strings ('..', N'..') and quoted identifiers ([..], "..") replaced (newlines kept).
# ---------------------------------------------------------------------------------------

def code_view(text):
    out = list(text)
    i, n = 0, len(text)

    def blank(a, b, fill=" "):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = fill

    while i < n:
        c = text[i]
        if text.startswith("--", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):  # T-SQL block comments nest
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c in "'\"[":
            close = "]" if c == "[" else c
            j = i + 1
            while j < n:
                if text[j] == close:
                    if j + 1 < n and text[j + 1] == close:  # doubled: escaped
                        j += 2
                        continue
                    break
                j += 1
            blank(i + 1, min(j, n), " " if c == "'" else "_")
            i = j + 1
        else:
            i += 1
    return "".join(out)


WORD_RE = re.compile(r"[A-Za-z_@#][\w@#$]*")


def words(code, start=0, end=None):
    """(word upper-cased, start, end) of the words of the code view, with paren depth."""
    end = len(code) if end is None else end
    depth, res = 0, []
    i = start
    while i < end:
        c = code[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "'" or c == "[" or c == '"':
            close = "]" if c == "[" else c
            j = code.find(close, i + 1)
            i = end if j < 0 else j + 1
            continue
        else:
            m = WORD_RE.match(code, i)
            if m and (i == 0 or not (code[i - 1].isalnum() or code[i - 1] in "_@#$")):
                res.append((m.group(0).upper(), m.start(), m.end(), depth))
                i = m.end()
                continue
        i += 1
    return res


def matching_paren(code, open_at):
    depth = 0
    for k in range(open_at, len(code)):
        if code[k] == "(":
            depth += 1
        elif code[k] == ")":
            depth -= 1
            if depth == 0:
                return k
    return None


# ---------------------------------------------------------------------------------------
# Masking
# ---------------------------------------------------------------------------------------

# Words that start a statement and never occur at parenthesis depth 0 inside one of the
# masked statements: a masked statement that is not terminated by `;` ends before them.
STATEMENT_START_WORDS = {
    "SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "SET", "DECLARE", "EXEC", "EXECUTE",
    "IF", "ELSE", "WHILE", "RETURN", "BREAK", "CONTINUE", "GOTO", "BEGIN", "END", "THROW",
    "RAISERROR", "PRINT", "COMMIT", "ROLLBACK", "SAVE", "GRANT", "DENY", "REVOKE", "CREATE",
    "ALTER", "DROP", "TRUNCATE", "USE", "OPEN", "FETCH", "CLOSE", "DEALLOCATE", "SEND",
    "RECEIVE", "WAITFOR", "GET",
}


def statement_end(code, start, body):
    """End offset (exclusive) of the masked statement at start, whose own leading keywords
    end at body: the first `;` outside parentheses, else the first word of
    STATEMENT_START_WORDS at depth 0 (END CONVERSATION included: a new statement), else
    the batch's end."""
    depth, i, n = 0, start, len(code)
    while i < n:
        c = code[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                return i
        elif c == ";" and depth == 0:
            return i
        elif c.isalpha() and (i == 0 or not (code[i - 1].isalnum() or code[i - 1] in "_@#$")):
            m = WORD_RE.match(code, i)
            if i >= body and depth == 0 and m.group(0).upper() in STATEMENT_START_WORDS:
                return i
            i = m.end()
            continue
        i += 1
    return n


def prev_token(code, pos):
    """The code token before pos: (text upper-cased, start) or (None, -1) at batch start."""
    k = pos - 1
    while k >= 0 and code[k].isspace():
        k -= 1
    if k < 0:
        return None, -1
    if code[k].isalnum() or code[k] in "_@#$":
        j = k
        while j > 0 and (code[j - 1].isalnum() or code[j - 1] in "_@#$"):
            j -= 1
        return code[j:k + 1].upper(), j
    return code[k], k


def terminated_before(code, pos):
    """Whether the statement starting at pos follows a `;` in the T-SQL sense (see
    NEEDS_SEMICOLON_BEFORE). Conservative: unsure cases count as terminated."""
    tok, at = prev_token(code, pos)
    if tok in ("TRY", "CATCH") and prev_token(code, at)[0] == "END":
        return False
    if tok is None or tok in (";", "BEGIN", "TRY", "CATCH", "ELSE", "AS"):
        return True
    # The body of IF/WHILE: walk back to the start of the enclosing statement.
    k = pos
    while True:
        tok, at = prev_token(code, k)
        if tok is None or tok in (";", "BEGIN", "TRY", "CATCH", "ELSE", "AS", "END"):
            break
        if tok == ")":
            open_at = None
            depth = 0
            for j in range(at, -1, -1):
                if code[j] == ")":
                    depth += 1
                elif code[j] == "(":
                    depth -= 1
                    if depth == 0:
                        open_at = j
                        break
            if open_at is None:
                return True
            k = open_at
            continue
        k = at
    first = words(code, k, pos)
    return bool(first) and first[0][0] in ("IF", "WHILE")


def mask_batch(text):
    """(masked text, counts per mask name, errors [(offset, message)])."""
    code = code_view(text)
    edits = []  # (start, end, replacement)
    counts = {}
    errors = []

    def overlaps(a, b):
        return any(a < e and s < b for s, e, _ in edits)

    # Statements.
    found = []
    for name, pat in STATEMENT_MASKS:
        for m in re.finditer(pat, code, re.I):
            found.append((m.start(), m.end(), name))
    for start, body, name in sorted(found):
        if overlaps(start, start + 1):
            continue  # e.g. the RECEIVE inside a masked WAITFOR (...)
        end = statement_end(code, start, body)
        while end > start and code[end - 1].isspace():
            end -= 1
        region = text[start:end]
        first_len = region.find("\n") if "\n" in region else len(region)
        rest = re.sub(r"[^\n]", " ", region[max(first_len, 8):] if first_len >= 8 else region[first_len:])
        repl = "SELECT 1" + (" " * (first_len - 8) if first_len >= 8 else "") + rest
        edits.append((start, end, repl))
        counts[name] = counts.get(name, 0) + 1
        if name in NEEDS_SEMICOLON_BEFORE and not terminated_before(code, start):
            errors.append((start, "the statement before %s must end with ';' (SEND and RECEIVE "
                                  "docs: the preceding statement must be terminated with a semicolon)"
                                  % name.upper()))

    # Clauses.
    for name, pat in CLAUSE_MASKS:
        for m in re.finditer(pat, code, re.I):
            if overlaps(m.start(), m.end()):
                continue
            if name == "securable class":
                a, b = m.start(1), m.end(1)
                cls = text[a:b]
                repl = "OBJECT" + re.sub(r"[^\n]", " ", cls[6:]) if len(cls) >= 6 else "OBJECT"
                edits.append((a, b, repl))
            elif name == "with xmlnamespaces":
                close = matching_paren(code, m.end() - 1)
                if close is None:
                    continue  # unbalanced: leave it to sqlfluff to report
                a, b = m.start(), close + 1
                edits.append((a, b, re.sub(r"[^\n]", " ", text[a:b])))
                if not terminated_before(code, a):
                    errors.append((a, "the statement before WITH XMLNAMESPACES must end with ';' "
                                      "(as before a CTE; SQL Server Msg 319)"))
            elif name == "execute as N'":
                edits.append((m.start(1), m.end(1), " "))
            elif name == "for json/xml after set operator":
                span = for_clause_after_set_op(code, m.start(), m.end())
                if span is None:
                    continue
                a, b, in_parens = span
                edits.append((a, b, re.sub(r"[^\n]", " ", text[a:b])))
                if in_parens:
                    errors.append((a, "FOR JSON/XML on a query with UNION/EXCEPT/INTERSECT inside "
                                      "parentheses: SQL Server refuses it (Msg 1086); put the set "
                                      "operation in a derived table and apply FOR to a SELECT over it"))
            else:  # pragma: no cover
                raise AssertionError(name)
            counts[name] = counts.get(name, 0) + 1

    masked = text
    for a, b, repl in sorted(edits, reverse=True):
        masked = masked[:a] + repl + masked[b:]
    assert masked.count("\n") == text.count("\n")
    return masked, counts, errors


def for_clause_after_set_op(code, for_start, for_end):
    """(start, end, inside parentheses) of a FOR JSON/XML clause whose query has a set
    operator, else None."""
    # The query: back to the unmatched `(` or the previous `;` / batch start.
    depth, k = 0, for_start - 1
    while k >= 0:
        c = code[k]
        if c == ")":
            depth += 1
        elif c == "(":
            if depth == 0:
                break
            depth -= 1
        elif c == ";" and depth == 0:
            break
        k -= 1
    if not any(w in ("UNION", "EXCEPT", "INTERSECT") and d == 0
               for w, _, _, d in words(code, k + 1, for_start)):
        return None
    # The clause: FOR JSON|XML item {, item}; item = option words [ ( ... ) ].
    i, n = for_end, len(code)

    def skip_ws(i):
        while i < n and code[i].isspace():
            i += 1
        return i

    end = for_end
    while True:
        i = skip_ws(i)
        took = False
        while True:
            m = WORD_RE.match(code, i)
            if not m or m.group(0).upper() not in FOR_CLAUSE_WORDS:
                break
            i = end = m.end()
            took = True
            j = skip_ws(i)
            if j < n and code[j] == "(":
                close = matching_paren(code, j)
                if close is None:
                    return None
                i = end = close + 1
                break
            i = skip_ws(i)
        if not took:
            break
        j = skip_ws(i)
        if j < n and code[j] == ",":
            i = j + 1
            continue
        break
    return for_start, end, k >= 0 and code[k] == "("


# ---------------------------------------------------------------------------------------
# sqlcmd layer
# ---------------------------------------------------------------------------------------

GO_RE = re.compile(r"^\s*GO(?:\s+\d+)?\s*$", re.I)
CMD_RE = re.compile(r"^\s*(?::|!!)")
SETVAR_RE = re.compile(r"^\s*:setvar\s+(\w+)(?:\s+(\"[^\"]*\"|\S+))?\s*$", re.I)
VAR_RE = re.compile(r"\$\((\w+)\)")


def batches(path, cli_vars):
    """Yields (start line, text of the batch with blank lines for stripped ones), and
    errors as (line, message)."""
    with open(path, encoding="utf-8-sig") as f:
        raw = f.read().replace("\r\n", "\n")
    lines = raw.split("\n")
    code_lines = code_view(raw).split("\n")
    vars_ = dict(SAMPLE_VARS)
    vars_.update(cli_vars)
    errors, out, cur, start = [], [], [], 1
    for no, (line, code) in enumerate(zip(lines, code_lines), 1):
        in_code = code.strip() != "" and code.lstrip()[:1] == line.lstrip()[:1]
        if in_code and GO_RE.match(code) and GO_RE.match(line.split("--")[0]):
            out.append((start, "\n".join(cur)))
            cur, start = [], no + 1
            continue
        if in_code and CMD_RE.match(line):
            m = SETVAR_RE.match(line)
            if m:
                vars_[m.group(1)] = (m.group(2) or "").strip('"')
            elif re.match(r"^\s*:r\b", line, re.I):
                errors.append((no, ":r (include) is not followed by this checker"))
            cur.append("")
            continue

        def sub(m):
            if m.group(1) in vars_:
                return vars_[m.group(1)]
            errors.append((no, "sqlcmd variable $(%s) is not defined (:setvar or -v)" % m.group(1)))
            return m.group(1)

        cur.append(VAR_RE.sub(sub, line))
    out.append((start, "\n".join(cur)))
    return out, errors


# ---------------------------------------------------------------------------------------
# Parsing and locating errors
# ---------------------------------------------------------------------------------------

def make_linter():
    cfg = FluffConfig(overrides={
        "dialect": "tsql",
        "templater": "raw",  # not jinja: {{ }} / {% %} in strings are SQL text here
        "large_file_skip_char_limit": 0,
        "large_file_skip_byte_limit": 0,
    })
    return Linter(config=cfg)


def parse_errors(linter, text):
    parsed = linter.parse_string(text)
    return [v for v in parsed.violations if isinstance(v, (SQLParseError, SQLLexError))]


def short(v):
    desc = re.sub(r"^Line \d+, Position \d+: ", "", v.desc())
    desc = re.sub(r"\. Expected: .*", "", desc, flags=re.S)
    desc = desc.replace("\\n", " ").replace("\n", " ")
    desc = re.sub(r"\s+", " ", desc)
    return "%s (col %s)" % (desc[:160], v.line_pos)


def block_closers(code, upto):
    """The END / END TRY ... text that closes the blocks still open at offset upto."""
    stack = []
    ws = words(code, 0, upto)
    for idx, (w, s, e, d) in enumerate(ws):
        nxt = ws[idx + 1][0] if idx + 1 < len(ws) else ""
        if w == "BEGIN" and nxt not in NOT_BLOCK_AFTER_BEGIN:
            stack.append(nxt if nxt in ("TRY", "CATCH") else "BLOCK")
        elif w == "CASE":
            stack.append("BLOCK")
        elif w == "END" and nxt != "CONVERSATION" and stack:
            stack.pop()
    out = []
    for kind in reversed(stack):
        out.append({"BLOCK": "\nEND", "TRY": "\nEND TRY BEGIN CATCH END CATCH",
                    "CATCH": "\nEND CATCH"}[kind])
    return "".join(out)


def localize(linter, text, orig):
    """For a failing (masked, line-padded) batch: (line, message) of the first statement
    that breaks it. sqlfluff reports an error anywhere inside CREATE PROCEDURE / IF /
    BEGIN..END as the whole construct being unparsable, at its first line; this parses
    growing prefixes of the batch, each cut after a `;` and closed with the END (END TRY
    / END CATCH) of every block still open, and returns the first statement whose prefix
    fails. None when every prefix parses (the error is after the last `;`, or in the
    BEGIN/END structure, e.g. a missing END). orig: the batch before masking, for the
    snippet quoted in the message."""
    code = code_view(text)
    cuts = [i + 1 for i, c in enumerate(code) if c == ";" and
            code[:i].count("(") == code[:i].count(")")]
    if not cuts:
        return None

    def fails(k):
        return bool(parse_errors(linter, text[:cuts[k]] + block_closers(code, cuts[k])))

    lo, hi = 0, len(cuts) - 1
    if not fails(hi):
        return None
    while lo < hi:  # first failing cut
        mid = (lo + hi) // 2
        if fails(mid):
            hi = mid
        else:
            lo = mid + 1
    a = cuts[lo - 1] if lo > 0 else 0
    b = cuts[lo]
    # Skip the block words before the statement, in the order they can come:
    # END [TRY|CATCH] ... [ELSE] BEGIN [TRY|CATCH] ... (a stray second ELSE is not skipped).
    ws = words(code, a, b)
    skip_to, idx, phase = a, 0, 0
    while idx < len(ws):
        w = ws[idx][0]
        nxt = ws[idx + 1][0] if idx + 1 < len(ws) else ""
        if w == "END" and phase == 0 and nxt != "CONVERSATION":
            idx += 2 if nxt in ("TRY", "CATCH") else 1
        elif w == "ELSE" and phase == 0:
            phase, idx = 1, idx + 1
        elif w == "BEGIN" and nxt not in NOT_BLOCK_AFTER_BEGIN:
            phase, idx = 1, idx + (2 if nxt in ("TRY", "CATCH") else 1)
        else:
            break
        skip_to = ws[idx - 1][2]
    if idx < len(ws):
        skip_to = ws[idx][1]
    line = text.count("\n", 0, skip_to) + 1
    # The statement on its own (everything before it blanked, so lines stay right), for
    # sqlfluff's precise message when it has one.
    alone = re.sub(r"[^\n]", " ", text[:skip_to]) + text[skip_to:b] + block_closers(code[skip_to:b], b - skip_to)
    errs = parse_errors(linter, alone)
    if errs and errs[0].line_no >= line:
        return errs[0].line_no, short(errs[0])
    snippet = re.sub(r"\s+", " ", orig[skip_to:skip_to + (b - skip_to) * 2]).strip()
    return line, "unparsable statement inside the enclosing block: %s" % snippet[:100]


def main(argv):
    cli_vars, paths, show_masked = {}, [], False
    it = iter(argv)
    for arg in it:
        if arg == "-v":
            for kv in [next(it, "")]:
                if "=" not in kv:
                    sys.stderr.write("tsql_parse: -v wants NAME=VALUE\n")
                    return 2
                k, v = kv.split("=", 1)
                cli_vars[k] = v
        elif arg == "--masked":
            show_masked = True
        elif arg in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            paths.append(arg)
    if not paths:
        sys.stderr.write("usage: tsql_parse.py [-v NAME=VALUE ...] [--masked] FILE.sql ...\n")
        return 2

    t0 = time.time()
    linter = make_linter()
    failures, n_batches, totals = [], 0, {}
    for path in paths:
        bs, errs = batches(path, cli_vars)
        for line, msg in errs:
            failures.append("%s:%d: %s" % (path, line, msg))
        for start, text in bs:
            if not code_view(text).strip():
                continue
            n_batches += 1
            masked, counts, mask_errs = mask_batch(text)
            for k, v in counts.items():
                totals[k] = totals.get(k, 0) + v
            padded = "\n" * (start - 1) + masked
            if show_masked:
                for no, l in enumerate(masked.split("\n"), start):
                    print("%s:%d| %s" % (path, no, l))
                print("%s:%d| GO" % (path, start + masked.count("\n") + 1))
            for off, msg in mask_errs:
                failures.append("%s:%d: %s" % (path, padded.count("\n", 0, off + start - 1) + 1, msg))
            errs = parse_errors(linter, padded)
            if not errs:
                continue
            first = errs[0]
            loc = localize(linter, padded, "\n" * (start - 1) + text)
            if loc:
                line, msg = loc
            else:
                line, msg = first.line_no, short(first)
                pcode = code_view(padded)
                first_code_line = pcode.count("\n", 0, len(pcode) - len(pcode.lstrip())) + 1
                if first.line_no == first_code_line and pcode.count(";") > 1:
                    msg += "; every statement up to the last ';' parses on its own: look at" \
                           " the BEGIN/END/IF/ELSE structure or the text after the last ';'"
            extra = ""
            lines_m, lines_o = padded.split("\n"), ("\n" * (start - 1) + text).split("\n")
            if 0 < line <= len(lines_m) and lines_m[line - 1] != lines_o[line - 1]:
                extra += " (sqlfluff saw this line masked: %s)" % lines_m[line - 1].strip()[:80]
            if len(errs) > 1:
                extra = " (+%d more parse errors in this batch)" % (len(errs) - 1)
            failures.append("%s:%d: %s [batch at line %d]%s" % (path, line, msg, start, extra))
    elapsed = time.time() - t0
    for f in failures:
        print(f)
    masked_s = ", ".join("%s %d" % kv for kv in sorted(totals.items())) or "none"
    if failures:
        print("tsql_parse: %d error(s) in %d file(s), %d batch(es); sqlfluff %s tsql; %.1fs"
              % (len(failures), len(paths), n_batches, sqlfluff.__version__, elapsed), file=sys.stderr)
        return 1
    print("tsql_parse: OK: %d file(s), %d batch(es) parse with sqlfluff %s (tsql) in %.1fs; "
          "masked: %s" % (len(paths), n_batches, sqlfluff.__version__, elapsed, masked_s))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
