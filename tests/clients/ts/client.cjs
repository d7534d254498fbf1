// Drives mcp-tasks with the official TypeScript SDK (@modelcontextprotocol/sdk 1.x), the
// way an application would, and prints one JSON line per step for the Rust test
// (tests/it/clients) to check. Nothing here decides whether the server is right: the
// test does, from what the library reports.
//
//   NODE_PATH=<cache>/ts/node_modules node client.cjs URL
'use strict';

const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { ElicitRequestSchema, CallToolResultSchema } = require('@modelcontextprotocol/sdk/types.js');

const url = new URL(process.argv[2]);
const say = (step, fields) => console.log(JSON.stringify({ step, ...fields }));
const text = result => (result.content || []).filter(c => c.type === 'text').map(c => c.text).join('\n');

async function main() {
  const elicitations = [];
  const client = new Client(
    { name: 'mcp-tasks-ts-test', version: '1.0.0' },
    { capabilities: { elicitation: { form: {} } } }
  );
  // The library's own elicitation handler: the server's elicitation/create arrives on the
  // call's stream, and the answer goes back as a JSON-RPC response the SDK POSTs.
  client.setRequestHandler(ElicitRequestSchema, async request => {
    const schema = request.params.requestedSchema || {};
    const field = Object.keys(schema.properties || {})[0];
    elicitations.push({
      message: request.params.message,
      field,
      mode: request.params.mode ?? null,
      relatedTask: request.params._meta?.['io.modelcontextprotocol/related-task']?.taskId ?? null
    });
    return { action: 'accept', content: { [field]: true } };
  });

  const transport = new StreamableHTTPClientTransport(url);
  await client.connect(transport);
  say('connected', {
    protocolVersion: transport.protocolVersion,
    hasSession: typeof transport.sessionId === 'string' && transport.sessionId.length > 0,
    server: client.getServerVersion(),
    capabilities: client.getServerCapabilities()
  });

  const { tools } = await client.listTools();
  say('tools', {
    names: tools.map(t => t.name),
    taskSupport: Object.fromEntries(tools.map(t => [t.name, t.execution?.taskSupport ?? null]))
  });

  await client.ping();
  say('ping', {});

  const greet = await client.callTool({ name: 'greet', arguments: { name: 'TypeScript' } });
  say('greet', { text: text(greet), isError: greet.isError ?? false });

  const progress = [];
  const slow = await client.callTool(
    { name: 'slow_compute', arguments: { seconds: 2, label: 'ts' } },
    CallToolResultSchema,
    { onprogress: p => progress.push(p), resetTimeoutOnProgress: true }
  );
  say('slow_compute', { text: text(slow), progress });

  const report = await client.callTool({ name: 'generate_report', arguments: { size: 'small' } });
  say('generate_report', {
    text: text(report),
    structured: report.structuredContent ?? null,
    elicitations: elicitations.splice(0)
  });

  const deletion = await client.callTool({ name: 'confirm_delete', arguments: { filename: 'notes.txt' } });
  say('confirm_delete', { text: text(deletion), elicitations: elicitations.splice(0) });

  // The experimental tasks client of 2025-11-25: create, poll, read the result.
  const tasks = client.experimental.tasks;
  const seen = [];
  let created = null;
  let result = null;
  for await (const message of tasks.callToolStream(
    { name: 'slow_compute', arguments: { seconds: 1, label: 'task' } },
    CallToolResultSchema,
    { task: { ttl: 60000 } }
  )) {
    seen.push(message.type === 'taskStatus' ? `status:${message.task.status}` : message.type);
    if (message.type === 'taskCreated') created = message.task;
    if (message.type === 'result') result = message.result;
    if (message.type === 'error') throw message.error;
  }
  const fetched = await tasks.getTask(created.taskId);
  const payload = await tasks.getTaskResult(created.taskId, CallToolResultSchema);
  const listed = await tasks.listTasks();
  say('task', {
    created,
    seen,
    text: text(result),
    fetched,
    resultText: text(payload),
    relatedTask: payload._meta?.['io.modelcontextprotocol/related-task']?.taskId ?? null,
    listed: listed.tasks.map(t => t.taskId)
  });

  // A task that asks for input: the elicitation comes on tasks/result.
  let reportResult = null;
  for await (const message of tasks.callToolStream(
    { name: 'generate_report', arguments: { size: 'medium' } },
    CallToolResultSchema,
    { task: {} }
  )) {
    if (message.type === 'result') reportResult = message.result;
    if (message.type === 'error') throw message.error;
  }
  say('task_with_input', { text: text(reportResult), elicitations: elicitations.splice(0) });

  // Cancel a long task as soon as it exists.
  let cancelled = null;
  let afterCancel = null;
  for await (const message of tasks.callToolStream(
    { name: 'slow_compute', arguments: { seconds: 60, label: 'cancel-me' } },
    CallToolResultSchema,
    { task: {} }
  )) {
    if (message.type === 'taskCreated') {
      cancelled = await tasks.cancelTask(message.task.taskId);
      afterCancel = await tasks.getTask(message.task.taskId);
    }
    if (message.type === 'error' || message.type === 'result') break;
  }
  let cancelAgain = null;
  try {
    await tasks.cancelTask(cancelled.taskId);
  } catch (e) {
    cancelAgain = { code: e.code, message: e.message };
  }
  say('cancel', { cancelled, afterCancel, cancelAgain });

  // End the session (DELETE); its id no longer works, on any replica.
  const sessionId = transport.sessionId;
  await transport.terminateSession();
  const statuses = [];
  for (let i = 0; i < 2; i++) {
    const response = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-session-id': sessionId,
        'mcp-protocol-version': transport.protocolVersion
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 99 + i, method: 'tools/list', params: {} })
    });
    statuses.push(response.status);
  }
  say('deleted', { statuses });
  await client.close();
}

main().then(
  () => process.exit(0),
  error => {
    say('error', { message: String(error && error.stack ? error.stack : error) });
    process.exit(1);
  }
);
