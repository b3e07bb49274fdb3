// The official MCP TypeScript SDK as a client of Tracon's MCP server (tests/tests/mcp_server_e2e.rs):
// connect over Streamable HTTP with an ExternalInvoke key, list the tools, call the exposed
// agent, then call it again as a task (the SDK's experimental tasks API) and read the task back.
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

const url = new URL(process.env.TRACON_MCP_URL);
const tool = process.env.TRACON_MCP_TOOL;
const expected = process.env.TRACON_MCP_ANSWER;
const transport = new StreamableHTTPClientTransport(url, {
  requestInit: { headers: { Authorization: `Bearer ${process.env.TRACON_MCP_KEY}` } },
});
const client = new Client({ name: 'tracon-e2e', version: '1.0.0' });
await client.connect(transport);
assert.equal(client.getServerVersion().name, 'tracon');
assert.ok(client.getServerCapabilities().tasks, 'the server offers tasks');

const { tools } = await client.listTools();
const listed = tools.find((t) => t.name === tool);
assert.ok(listed, `tool ${tool} listed: ${JSON.stringify(tools)}`);
assert.deepEqual(listed.inputSchema.required, ['message']);

const result = await client.callTool({ name: tool, arguments: { message: 'Where is order 4182?' } });
assert.equal(result.isError, false, JSON.stringify(result));
assert.equal(result.content[0].text, expected);

const unknown = await client.callTool({ name: 'nope', arguments: { message: 'x' } }).catch((e) => e);
assert.ok(unknown instanceof Error && /Unknown tool/.test(unknown.message), String(unknown));

// As a task: created at once, polled, its result fetched.
const stream = client.experimental.tasks.callToolStream(
  { name: tool, arguments: { message: 'Where is order 4182, later?' } },
  CallToolResultSchema,
  { task: { ttl: 60000 } },
);
let taskId;
let final;
for await (const message of stream) {
  if (message.type === 'taskCreated') taskId = message.task.taskId;
  if (message.type === 'result') final = message.result;
  if (message.type === 'error') throw message.error;
}
assert.ok(taskId, 'a task was created');
assert.equal(final?.content?.[0]?.text, expected, JSON.stringify(final));
const task = await client.experimental.tasks.getTask(taskId);
assert.equal(task.status, 'completed');
const { tasks } = await client.experimental.tasks.listTasks();
assert.ok(tasks.some((t) => t.taskId === taskId), JSON.stringify(tasks));
await client.close();
console.log(`task ${taskId}`);
console.log('mcp: ok');
