//! The message loop of `kiln lsp`: JSON-RPC over stdio, requests answered from the [`Engine`],
//! documents checked on a worker thread that waits for typing to pause.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use lsp_server::{Connection, ErrorCode, Message, Notification, Request, Response};
use lsp_types::notification::{
    DidChangeTextDocument, DidCloseTextDocument, DidOpenTextDocument, Notification as _,
    PublishDiagnostics,
};
use lsp_types::request::{
    CodeActionRequest, Completion, DocumentSymbolRequest, FoldingRangeRequest, Formatting,
    GotoDefinition, HoverRequest, PrepareRenameRequest, References, Rename, Request as _,
};
use lsp_types::{
    CodeActionProviderCapability, CompletionOptions, HoverProviderCapability, OneOf,
    PublishDiagnosticsParams, ServerCapabilities, TextDocumentSyncCapability, TextDocumentSyncKind,
    Uri,
};

use super::engine::{analyze, Engine};
use super::{completion, features};

/// What the server offers.
pub fn capabilities() -> ServerCapabilities {
    ServerCapabilities {
        text_document_sync: Some(TextDocumentSyncCapability::Kind(TextDocumentSyncKind::FULL)),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(vec!["(".into(), " ".into(), ",".into()]),
            ..Default::default()
        }),
        definition_provider: Some(OneOf::Left(true)),
        references_provider: Some(OneOf::Left(true)),
        rename_provider: Some(OneOf::Right(lsp_types::RenameOptions {
            prepare_provider: Some(true),
            work_done_progress_options: Default::default(),
        })),
        document_symbol_provider: Some(OneOf::Left(true)),
        folding_range_provider: Some(lsp_types::FoldingRangeProviderCapability::Simple(true)),
        code_action_provider: Some(CodeActionProviderCapability::Simple(true)),
        document_formatting_provider: Some(OneOf::Left(true)),
        ..Default::default()
    }
}

/// Serves the protocol on stdin and stdout until the client says `exit`.
pub fn run() -> Result<(), String> {
    let (connection, io) = Connection::stdio();
    let caps = serde_json::to_value(capabilities()).map_err(|e| e.to_string())?;
    connection
        .initialize(caps)
        .map_err(|e| format!("initialize: {e}"))?;
    let engine = Arc::new(Mutex::new(Engine::default()));
    let (jobs, queue) = mpsc::channel::<Uri>();
    let worker = {
        let engine = Arc::clone(&engine);
        let sender = connection.sender.clone();
        std::thread::spawn(move || check_loop(&engine, &queue, |m| sender.send(m).is_ok()))
    };
    serve(&connection, &engine, &jobs)?;
    drop(jobs);
    drop(connection);
    let _ = worker.join();
    io.join().map_err(|e| format!("stdio: {e}"))
}

fn lock(engine: &Mutex<Engine>) -> std::sync::MutexGuard<'_, Engine> {
    // A request that panicked while holding the lock left the documents as they were.
    engine.lock().unwrap_or_else(|p| p.into_inner())
}

/// Checks documents as they change, newest text each time. A change after a quiet spell is
/// checked at once; the changes that arrive while a check runs are merged into the next one (one
/// check per document however many edits came meanwhile), so fast typing never builds a backlog
/// and a pause gets its diagnostics after one check's time.
fn check_loop(engine: &Mutex<Engine>, queue: &mpsc::Receiver<Uri>, send: impl Fn(Message) -> bool) {
    while let Ok(first) = queue.recv() {
        let mut pending = vec![first];
        while let Ok(uri) = queue.try_recv() {
            if !pending.contains(&uri) {
                pending.push(uri);
            }
        }
        for uri in pending {
            let Some(job) = lock(engine).job(&uri) else {
                continue;
            };
            let Ok((analysis, leftovers)) = catch_unwind(AssertUnwindSafe(|| analyze(&job))) else {
                continue;
            };
            let diagnostics = analysis
                .diagnostics
                .iter()
                .map(|(d, _)| d.clone())
                .collect();
            let version = analysis.version;
            // Published under the lock, so that a document closed meanwhile is not published
            // after its diagnostics were cleared.
            let mut documents = lock(engine);
            let replaced = documents.store(&uri, analysis);
            if replaced.is_ok() {
                let params = PublishDiagnosticsParams::new(uri, diagnostics, Some(version));
                let note = Notification::new(PublishDiagnostics::METHOD.into(), params);
                if !send(note.into()) {
                    return;
                }
            }
            drop(documents);
            // Freed only now that the diagnostics are out.
            drop((replaced, leftovers));
        }
    }
}

fn serve(
    connection: &Connection,
    engine: &Mutex<Engine>,
    jobs: &mpsc::Sender<Uri>,
) -> Result<(), String> {
    for message in &connection.receiver {
        match message {
            Message::Request(request) => {
                if connection
                    .handle_shutdown(&request)
                    .map_err(|e| e.to_string())?
                {
                    return Ok(());
                }
                let id = request.id.clone();
                let answer = catch_unwind(AssertUnwindSafe(|| answer(&lock(engine), request)));
                let response = match answer {
                    Ok(Ok(value)) => Response::new_ok(id, value),
                    Ok(Err((code, message))) => Response::new_err(id, code as i32, message),
                    Err(_) => Response::new_err(
                        id,
                        ErrorCode::InternalError as i32,
                        "internal error while answering this request".into(),
                    ),
                };
                connection
                    .sender
                    .send(response.into())
                    .map_err(|e| e.to_string())?;
            }
            Message::Notification(note) => {
                let closed =
                    catch_unwind(AssertUnwindSafe(|| notify(&mut lock(engine), jobs, note)));
                if let Ok(Some(uri)) = closed {
                    // A closed document's diagnostics are cleared from the editor.
                    let params = PublishDiagnosticsParams::new(uri, Vec::new(), None);
                    let note = Notification::new(PublishDiagnostics::METHOD.into(), params);
                    connection
                        .sender
                        .send(note.into())
                        .map_err(|e| e.to_string())?;
                }
            }
            Message::Response(_) => {}
        }
    }
    Ok(())
}

/// Applies a notification to the documents; returns the document it closed, if any.
fn notify(engine: &mut Engine, jobs: &mpsc::Sender<Uri>, note: Notification) -> Option<Uri> {
    match note.method.as_str() {
        DidOpenTextDocument::METHOD => {
            if let Ok(p) =
                note.extract::<lsp_types::DidOpenTextDocumentParams>(DidOpenTextDocument::METHOD)
            {
                let doc = p.text_document;
                engine.open(doc.uri.clone(), doc.version, doc.text);
                let _ = jobs.send(doc.uri);
            }
        }
        DidChangeTextDocument::METHOD => {
            if let Ok(p) = note
                .extract::<lsp_types::DidChangeTextDocumentParams>(DidChangeTextDocument::METHOD)
            {
                if let Some(change) = p.content_changes.into_iter().next_back() {
                    let doc = p.text_document;
                    engine.change(&doc.uri, doc.version, change.text);
                    let _ = jobs.send(doc.uri);
                }
            }
        }
        DidCloseTextDocument::METHOD => {
            if let Ok(p) =
                note.extract::<lsp_types::DidCloseTextDocumentParams>(DidCloseTextDocument::METHOD)
            {
                engine.close(&p.text_document.uri);
                return Some(p.text_document.uri);
            }
        }
        _ => {}
    }
    None
}

type Answer = Result<serde_json::Value, (ErrorCode, String)>;

fn params<P: serde::de::DeserializeOwned>(
    request: Request,
    method: &str,
) -> Result<P, (ErrorCode, String)> {
    request
        .extract(method)
        .map(|(_, p)| p)
        .map_err(|e| (ErrorCode::InvalidParams, format!("{e:?}")))
}

fn json(value: impl serde::Serialize) -> Answer {
    serde_json::to_value(value).map_err(|e| (ErrorCode::InternalError, e.to_string()))
}

fn answer(engine: &Engine, request: Request) -> Answer {
    let closed = || {
        (
            ErrorCode::InvalidParams,
            "the document is not open".to_string(),
        )
    };
    match request.method.as_str() {
        HoverRequest::METHOD => {
            let p: lsp_types::HoverParams = params(request, HoverRequest::METHOD)?;
            let at = p.text_document_position_params;
            let doc = engine.doc(&at.text_document.uri).ok_or_else(closed)?;
            json(features::hover(doc, at.position))
        }
        Completion::METHOD => {
            let p: lsp_types::CompletionParams = params(request, Completion::METHOD)?;
            let at = p.text_document_position;
            let doc = engine.doc(&at.text_document.uri).ok_or_else(closed)?;
            json(completion::completion(
                doc,
                &at.text_document.uri,
                at.position,
            ))
        }
        GotoDefinition::METHOD => {
            let p: lsp_types::GotoDefinitionParams = params(request, GotoDefinition::METHOD)?;
            let at = p.text_document_position_params;
            let uri = at.text_document.uri;
            let doc = engine.doc(&uri).ok_or_else(closed)?;
            json(features::definition(doc, &uri, at.position))
        }
        References::METHOD => {
            let p: lsp_types::ReferenceParams = params(request, References::METHOD)?;
            let at = p.text_document_position;
            let uri = at.text_document.uri;
            let doc = engine.doc(&uri).ok_or_else(closed)?;
            if let Some(found) = features::extends_references(engine, &uri, at.position) {
                return json(found);
            }
            json(features::references(
                doc,
                &uri,
                at.position,
                p.context.include_declaration,
            ))
        }
        Rename::METHOD => {
            let p: lsp_types::RenameParams = params(request, Rename::METHOD)?;
            let at = p.text_document_position;
            let uri = at.text_document.uri;
            let doc = engine.doc(&uri).ok_or_else(closed)?;
            let edit = features::rename(doc, &uri, at.position, &p.new_name)
                .map_err(|why| (ErrorCode::RequestFailed, why))?;
            json(edit)
        }
        PrepareRenameRequest::METHOD => {
            let at: lsp_types::TextDocumentPositionParams =
                params(request, PrepareRenameRequest::METHOD)?;
            let doc = engine.doc(&at.text_document.uri).ok_or_else(closed)?;
            let range = features::prepare_rename(doc, at.position)
                .map_err(|why| (ErrorCode::RequestFailed, why))?;
            json(lsp_types::PrepareRenameResponse::Range(range))
        }
        DocumentSymbolRequest::METHOD => {
            let p: lsp_types::DocumentSymbolParams =
                params(request, DocumentSymbolRequest::METHOD)?;
            let doc = engine.doc(&p.text_document.uri).ok_or_else(closed)?;
            json(features::symbols(doc))
        }
        FoldingRangeRequest::METHOD => {
            let p: lsp_types::FoldingRangeParams = params(request, FoldingRangeRequest::METHOD)?;
            let doc = engine.doc(&p.text_document.uri).ok_or_else(closed)?;
            json(features::folding(doc))
        }
        CodeActionRequest::METHOD => {
            let p: lsp_types::CodeActionParams = params(request, CodeActionRequest::METHOD)?;
            let uri = p.text_document.uri;
            let doc = engine.doc(&uri).ok_or_else(closed)?;
            json(features::code_actions(doc, &uri, p.range))
        }
        Formatting::METHOD => {
            let p: lsp_types::DocumentFormattingParams = params(request, Formatting::METHOD)?;
            let doc = engine.doc(&p.text_document.uri).ok_or_else(closed)?;
            json(features::formatting(doc))
        }
        other => Err((
            ErrorCode::MethodNotFound,
            format!("`{other}` is not supported"),
        )),
    }
}
