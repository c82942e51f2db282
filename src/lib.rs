//! sbworker: a Service Broker activation worker for payroll recalculation.
//!
//! A roster change in the database sends an XML *Vraag* over a broker queue; sbworker
//! receives it, computes the wage factors and sends back an *Antwoord* or a *Fout*.
//!
//! # Layout
//! - [`contract`]: the message contract: typed model, strict decoder, encoder, Fout.

pub mod contract;
