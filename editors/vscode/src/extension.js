// The Kiln extension: starts the language server, `kiln lsp`, over stdio for `.exp` files.
// Highlighting comes from the TextMate grammar and needs no server; diagnostics, hover,
// completion, navigation, code actions and formatting come from the server.
'use strict';

const vscode = require('vscode');
const { LanguageClient, TransportKind } = require('vscode-languageclient/node');

/** The running client, kept so that `deactivate` can stop the server. */
let client;

/** Reads `kiln.path`: the kiln binary, a path or a name looked up on PATH. */
function kilnPath() {
  const configured = vscode.workspace.getConfiguration('kiln').get('path');
  return typeof configured === 'string' && configured.trim() !== '' ? configured.trim() : 'kiln';
}

/** Starts `kiln lsp` and the client that talks to it. */
async function start() {
  const command = kilnPath();
  const run = { command, args: ['lsp'], transport: TransportKind.stdio };
  client = new LanguageClient(
    'kiln',
    'Kiln',
    { run, debug: run },
    {
      documentSelector: [
        { scheme: 'file', language: 'kiln' },
        { scheme: 'untitled', language: 'kiln' },
      ],
      synchronize: {
        // A change to a file that another one extends is a reason to check again.
        fileEvents: vscode.workspace.createFileSystemWatcher('**/*.exp'),
      },
    },
  );
  try {
    await client.start();
  } catch (err) {
    client = undefined;
    vscode.window.showErrorMessage(
      `Kiln: could not start \`${command} lsp\` (${err && err.message ? err.message : err}). ` +
        'Set `kiln.path` to the kiln binary.',
    );
  }
}

/** Stops the client and the server, if they run. */
async function stop() {
  if (client) {
    const running = client;
    client = undefined;
    await running.stop();
  }
}

/** Called by VS Code when a `.exp` file is first opened. */
async function activate(context) {
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (event.affectsConfiguration('kiln.path')) {
        await stop();
        await start();
      }
    }),
    vscode.commands.registerCommand('kiln.restartServer', async () => {
      await stop();
      await start();
    }),
  );
  await start();
}

/** Called by VS Code when the extension is unloaded. */
function deactivate() {
  return stop();
}

module.exports = { activate, deactivate };
