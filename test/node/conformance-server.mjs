// The conformance fixture: an MCP server on the official v2 TypeScript server SDK
// (@modelcontextprotocol/server) that implements every tool, prompt and resource the
// conformance suite's server scenarios expect (@modelcontextprotocol/conformance 0.1.16 and
// 0.2.0-alpha.12), for every protocol version they test: 2025-03-26 to 2025-11-25 over
// sessionful streamable HTTP, and 2026-07-28 (stateless, per request) behind the same URL.
// test/conformance_test.go runs the suites against it directly and through the gateway.
//
// Usage: node conformance-server.mjs [port]
// It listens on 127.0.0.1 (port 0 picks a free one), prints its URL (http://127.0.0.1:PORT/mcp)
// as the first line of stdout, and exits when stdin closes or on SIGTERM/SIGINT.
//
// The SDK is loaded from LUSH_NODE_PREFIX/node_modules (the project-local npm install, see the
// Makefile's node-tools target), else from ../../.tools/node/node_modules next to this file.

import { createRequire } from 'node:module';
import { createServer } from 'node:http';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const prefix = process.env.LUSH_NODE_PREFIX || resolve(here, '../../.tools/node');
if (!existsSync(join(prefix, 'node_modules', '@modelcontextprotocol', 'server'))) {
    console.error(`conformance-server: @modelcontextprotocol/server is not installed under ${prefix} (run make node-tools)`);
    process.exit(2);
}
const require = createRequire(join(prefix, 'package.json'));
const sdk = require('@modelcontextprotocol/server');
const {
    McpServer,
    ResourceTemplate,
    WebStandardStreamableHTTPServerTransport,
    createMcpHandler,
    createRequestStateCodec,
    fromJsonSchema,
    inputRequired,
    isLegacyRequest,
    hostHeaderValidationResponse,
    localhostAllowedHostnames,
    originValidationResponse,
    localhostAllowedOrigins,
    ProtocolError,
    CLIENT_CAPABILITIES_META_KEY,
    SUPPORTED_PROTOCOL_VERSIONS
} = sdk;
const { SkillsExtension, memorySkillFiles } = require('@modelcontextprotocol/server/ext/skills');

const MAX_SESSIONS = 256; // sessionful (2025-era) sessions kept at once; the least recently used goes
const MAX_EVENTS = 4096; // SSE events kept for resumption (Last-Event-ID)
const MAX_BODY = 4 * 1024 * 1024;

// ---- content the scenarios check --------------------------------------------------------------

// A 1x1 PNG (one opaque red pixel) and a WAV of two silent 16-bit samples, made for this fixture.
const PNG_1x1 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC';
const WAV_SILENCE = 'UklGRigAAABXQVZFZm10IBAAAAABAAEAgD4AAAB9AAACABAAZGF0YQQAAAAAAAAA';

const JSON_SCHEMA_2020_12 = {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    type: 'object',
    $defs: {
        address: {
            $anchor: 'addressDef',
            type: 'object',
            properties: { street: { type: 'string' }, city: { type: 'string' } }
        }
    },
    properties: {
        name: { type: 'string' },
        address: { $ref: '#/$defs/address' },
        contactMethod: { type: 'string', enum: ['phone', 'email'] },
        phone: { type: 'string' },
        email: { type: 'string' }
    },
    allOf: [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }],
    if: { properties: { contactMethod: { const: 'phone' } }, required: ['contactMethod'] },
    then: { required: ['phone'] },
    else: { required: ['email'] },
    additionalProperties: false
};

const text = (t) => ({ content: [{ type: 'text', text: t }] });
const noArgs = () => fromJsonSchema({ type: 'object', properties: {} });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// requestState is HMAC-protected with a key of this process: a tampered state is refused with
// -32602 before the handler runs (input-required-result-tampered-state).
const stateCodec = createRequestStateCodec({ key: randomBytes(32), ttlSeconds: 600 });

// The accepted content of an elicitation answer in inputResponses, or undefined.
function accepted(ctx, key) {
    const r = ctx.mcpReq.inputResponses?.[key];
    if (!r || typeof r !== 'object' || r.action !== 'accept' || typeof r.content !== 'object' || r.content === null) {
        return undefined;
    }
    return r.content;
}
const response = (ctx, key) => {
    const r = ctx.mcpReq.inputResponses?.[key];
    return r && typeof r === 'object' ? r : undefined;
};

const elicitName = (message) =>
    inputRequired.elicit({
        message,
        requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] }
    });

// SEP-2640: two skills, one with a reference file, served by the SDK's skills extension.
const skills = await SkillsExtension.load(
    memorySkillFiles({
        'pdf-processing/SKILL.md': '---\nname: pdf-processing\ndescription: Fill in and read PDF forms.\n---\n\n# PDF processing\n\nSee references/FORMS.md for the form fields.\n',
        'pdf-processing/references/FORMS.md': '# Forms\n\nEvery form field has a name and a value.\n',
        'release-notes/SKILL.md': '---\nname: release-notes\ndescription: Write release notes from a changelog.\n---\n\n# Release notes\n\nGroup the changes by kind.\n'
    })
);

// ---- the tasks extension (SEP-2663), 2026-07-28 only -------------------------------------------
//
// Tasks live in this process (the 2026-07-28 instances are per request). A task-supporting tool
// called by a client that declared the extension returns a placeholder result naming its task,
// which createdTask() turns into the flat CreateTaskResult ({resultType: "task", taskId, status, ...})
// after the SDK has validated the request and its headers. tasks/get, tasks/update and
// tasks/cancel are ours; tasks/result and tasks/list are gone in 2026-07-28 (the SDK answers
// -32601).

const TASKS = 'io.modelcontextprotocol/tasks';
const TASK_MARK = 'lush.fixture/createdTask';
const TASK_TTL_MS = 5 * 60 * 1000;
const MAX_TASKS = 1024;
const tasks = new Map(); // taskId -> task

const declaresTasks = (ctx) => ctx.mcpReq.envelope?.[CLIENT_CAPABILITIES_META_KEY]?.extensions?.[TASKS] !== undefined;
const TASKS_REQUIRED = {
    code: -32021,
    message: `this request needs the ${TASKS} extension, which the client did not declare`,
    data: { requiredCapabilities: { extensions: { [TASKS]: {} } } }
};
const tasksRequired = () => new ProtocolError(TASKS_REQUIRED.code, TASKS_REQUIRED.message, TASKS_REQUIRED.data);
// A tool cannot answer a JSON-RPC error through the SDK (it turns a thrown error into an isError
// result), so on 2026-07-28 a required-task tool called without the extension returns this
// placeholder, which createdTask() turns into the -32021 error (HTTP 400). A 2025-era session
// cannot use tasks at all: there the tool fails (an isError result).
const ERROR_MARK = 'lush.fixture/error';
const refuseWithoutTasks = (session) => {
    if (session) throw tasksRequired();
    return { content: [], _meta: { [ERROR_MARK]: TASKS_REQUIRED } };
};

function touch(task, status) {
    task.status = status;
    task.lastUpdatedAt = new Date().toISOString();
}

// newTask records a task in status working and returns the placeholder tool result that
// createdTask() rewrites into its CreateTaskResult.
function newTask(run) {
    for (const [id, t] of tasks) {
        if (tasks.size < MAX_TASKS) break;
        if (t.status !== 'working' && t.status !== 'input_required') tasks.delete(id);
    }
    if (tasks.size >= MAX_TASKS) throw new ProtocolError(-32603, 'too many tasks');
    const now = new Date().toISOString();
    const task = { taskId: randomUUID(), status: 'working', createdAt: now, lastUpdatedAt: now, ttlMs: TASK_TTL_MS, pollIntervalMs: 100 };
    tasks.set(task.taskId, task);
    setTimeout(() => tasks.delete(task.taskId), TASK_TTL_MS).unref();
    run(task);
    return { content: [], _meta: { [TASK_MARK]: task.taskId } };
}

const finish = (task, result) => {
    if (task.status === 'cancelled') return;
    task.result = result;
    delete task.inputRequests;
    touch(task, 'completed');
};

// A task that waits for the client's answers to inputRequests, then completes with done(answers).
function askInTask(task, inputRequests, done) {
    task.inputRequests = inputRequests;
    task.answers = {};
    task.onInput = () => {
        if (Object.keys(task.inputRequests).length === 0) finish(task, done(task.answers));
    };
    touch(task, 'input_required');
}

const envelope = (task) => ({
    taskId: task.taskId,
    status: task.status,
    createdAt: task.createdAt,
    lastUpdatedAt: task.lastUpdatedAt,
    ttlMs: task.ttlMs,
    pollIntervalMs: task.pollIntervalMs
});

function taskOf(params) {
    const task = typeof params?.taskId === 'string' ? tasks.get(params.taskId) : undefined;
    if (!task) throw new ProtocolError(-32602, `unknown task ${JSON.stringify(params?.taskId)}`);
    return task;
}

function registerTaskTools(server, session) {
    server.registerTool(
        'greet',
        { description: 'Greets (never a task)', inputSchema: fromJsonSchema({ type: 'object', properties: { name: { type: 'string' } }, required: ['name'] }) },
        async ({ name }) => text(`Hello, ${name}!`)
    );
    server.registerTool(
        'slow_compute',
        {
            description: 'Sleeps for seconds, then answers; a task when the client supports tasks',
            inputSchema: fromJsonSchema({
                type: 'object',
                properties: { seconds: { type: 'number', minimum: 0, maximum: 600 }, label: { type: 'string' } },
                required: ['seconds']
            })
        },
        async ({ seconds, label }, ctx) => {
            const answer = () => text(`computed ${label ?? ''} after ${seconds}s`);
            if (!declaresTasks(ctx)) {
                await sleep(Math.min(seconds, 5) * 1000);
                return answer();
            }
            return newTask((task) => {
                task.timer = setTimeout(() => finish(task, answer()), seconds * 1000);
                task.timer.unref();
            });
        }
    );
    server.registerTool('failing_job', { description: 'A task (required) whose tool fails', inputSchema: noArgs() }, async (_args, ctx) => {
        if (!declaresTasks(ctx)) return refuseWithoutTasks(session);
        return newTask((task) => {
            setTimeout(() => finish(task, { isError: true, content: [{ type: 'text', text: 'the job failed' }] }), 300).unref();
        });
    });
    server.registerTool('protocol_error_job', { description: 'A task that fails with a protocol error', inputSchema: noArgs() }, async (_args, ctx) => {
        if (!declaresTasks(ctx)) return refuseWithoutTasks(session);
        return newTask((task) => {
            setTimeout(() => {
                if (task.status === 'cancelled') return;
                task.error = { code: -32603, message: 'internal failure in protocol_error_job' };
                touch(task, 'failed');
            }, 300).unref();
        });
    });
    server.registerTool(
        'confirm_delete',
        {
            description: 'A task that asks for confirmation before deleting a file',
            inputSchema: fromJsonSchema({ type: 'object', properties: { filename: { type: 'string' } }, required: ['filename'] })
        },
        async ({ filename }, ctx) => {
            if (!declaresTasks(ctx)) return refuseWithoutTasks(session);
            return newTask((task) =>
                askInTask(
                    task,
                    {
                        confirm: {
                            method: 'elicitation/create',
                            params: {
                                mode: 'form',
                                message: `Delete ${filename}?`,
                                requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] }
                            }
                        }
                    },
                    (answers) => text(answers.confirm?.content?.confirm === true ? `deleted ${filename}` : `kept ${filename}`)
                )
            );
        }
    );
    server.registerTool('multi_input', { description: 'A task that asks two questions at once', inputSchema: noArgs() }, async (_args, ctx) => {
        if (!declaresTasks(ctx)) return refuseWithoutTasks(session);
        const ask = (message) => ({
            method: 'elicitation/create',
            params: { mode: 'form', message, requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } }
        });
        return newTask((task) =>
            askInTask(task, { first: ask('First name?'), second: ask('Second name?') }, (answers) =>
                text(`got ${answers.first?.content?.name} and ${answers.second?.content?.name}`)
            )
        );
    });
    // SEP-2322 + SEP-2663: asks for a name in a multi-round-trip exchange, then runs as a task.
    server.registerTool('test_tool_with_task', { description: 'Asks for a name, then greets in a task', inputSchema: noArgs() }, async (_args, ctx) => {
        const name = accepted(ctx, 'user_name')?.name;
        if (typeof name !== 'string') return inputRequired({ inputRequests: { user_name: elicitName('What is your name?') } });
        if (!declaresTasks(ctx)) return text(`Hello, ${name}!`);
        return newTask((task) => setTimeout(() => finish(task, text(`Hello, ${name}!`)), 100).unref());
    });
}

function registerTaskMethods(server) {
    const taskId = fromJsonSchema({ type: 'object', properties: { taskId: { type: 'string' } }, required: ['taskId'] });
    const anyResult = fromJsonSchema({ type: 'object' });
    server.server.setRequestHandler('tasks/get', { params: taskId, result: anyResult }, async (params, ctx) => {
        if (!declaresTasks(ctx)) throw tasksRequired();
        const task = taskOf(params);
        const detailed = { resultType: 'complete', ...envelope(task) };
        if (task.status === 'completed') detailed.result = task.result;
        if (task.status === 'failed') detailed.error = task.error;
        if (task.status === 'input_required') detailed.inputRequests = task.inputRequests;
        return detailed;
    });
    server.server.setRequestHandler(
        'tasks/update',
        {
            params: taskId,
            result: anyResult
        },
        async (params, ctx) => {
            if (!declaresTasks(ctx)) throw tasksRequired();
            const task = taskOf(params);
            if (task.status === 'input_required') {
                // the SDK lifts inputResponses out of params (as for any multi-round-trip retry)
                for (const [key, answer] of Object.entries(ctx.mcpReq.inputResponses ?? {})) {
                    if (!(key in task.inputRequests) || typeof answer !== 'object' || answer === null) continue;
                    task.answers[key] = answer;
                    delete task.inputRequests[key];
                }
                task.onInput();
            }
            return { resultType: 'complete' };
        }
    );
    server.server.setRequestHandler('tasks/cancel', { params: taskId, result: anyResult }, async (params, ctx) => {
        if (!declaresTasks(ctx)) throw tasksRequired();
        const task = taskOf(params);
        if (task.status === 'working' || task.status === 'input_required') {
            clearTimeout(task.timer);
            delete task.inputRequests;
            touch(task, 'cancelled');
        }
        return { resultType: 'complete' };
    });
}

// createdTask turns a placeholder result in a JSON response into the task's CreateTaskResult
// (see newTask) or into a JSON-RPC error (see refuseWithoutTasks); any other response is
// returned as it is.
async function createdTask(res) {
    if (!res.headers.get('content-type')?.includes('application/json')) return res;
    const body = await res.text();
    const rebuilt = () => new Response(body, { status: res.status, headers: res.headers });
    if (!body.includes(TASK_MARK) && !body.includes(ERROR_MARK)) return rebuilt();
    const msg = JSON.parse(body);
    const error = msg.result?._meta?.[ERROR_MARK];
    if (error) {
        return new Response(JSON.stringify({ jsonrpc: '2.0', id: msg.id, error }), {
            status: 400,
            headers: { 'content-type': 'application/json' }
        });
    }
    const task = tasks.get(msg.result?._meta?.[TASK_MARK]);
    if (!task) return rebuilt();
    const { [TASK_MARK]: _, ...meta } = msg.result._meta;
    msg.result = { resultType: 'task', ...envelope(task), ...(Object.keys(meta).length ? { _meta: meta } : {}) };
    const headers = new Headers(res.headers);
    headers.delete('content-length');
    return new Response(JSON.stringify(msg), { status: res.status, headers });
}

// ---- the server -------------------------------------------------------------------------------

// session is the 2025-era session a legacy instance serves, with the resources its client
// subscribed to; undefined for the per-request instances of 2026-07-28.
function buildServer(session) {
    const server = new McpServer(
        { name: 'lush-conformance-fixture', version: '1.0.0' },
        {
            capabilities: {
                tools: { listChanged: true },
                resources: { subscribe: true, listChanged: true },
                prompts: { listChanged: true },
                logging: {},
                completions: {},
                ...(session ? {} : { extensions: { [TASKS]: {} } })
            },
            requestState: { verify: (state, ctx) => stateCodec.verify(state, ctx) }
        }
    );

    // -- tools: content --
    server.registerTool('test_simple_text', { description: 'Returns simple text content', inputSchema: noArgs() }, async () =>
        text('This is a simple text response for testing.')
    );
    server.registerTool('test_image_content', { description: 'Returns image content', inputSchema: noArgs() }, async () => ({
        content: [{ type: 'image', data: PNG_1x1, mimeType: 'image/png' }]
    }));
    server.registerTool('test_audio_content', { description: 'Returns audio content', inputSchema: noArgs() }, async () => ({
        content: [{ type: 'audio', data: WAV_SILENCE, mimeType: 'audio/wav' }]
    }));
    server.registerTool('test_embedded_resource', { description: 'Returns an embedded resource', inputSchema: noArgs() }, async () => ({
        content: [
            {
                type: 'resource',
                resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' }
            }
        ]
    }));
    server.registerTool(
        'test_multiple_content_types',
        { description: 'Returns text, image and resource content', inputSchema: noArgs() },
        async () => ({
            content: [
                { type: 'text', text: 'Multiple content types test:' },
                { type: 'image', data: PNG_1x1, mimeType: 'image/png' },
                {
                    type: 'resource',
                    resource: {
                        uri: 'test://mixed-content-resource',
                        mimeType: 'application/json',
                        text: JSON.stringify({ test: 'data', value: 123 })
                    }
                }
            ]
        })
    );
    server.registerTool('test_error_handling', { description: 'Always fails', inputSchema: noArgs() }, async () => {
        throw new Error('This tool intentionally returns an error for testing');
    });
    server.registerTool(
        'json_schema_2020_12_tool',
        { description: 'Tool with JSON Schema 2020-12 features', inputSchema: fromJsonSchema(JSON_SCHEMA_2020_12) },
        async () => text('ok')
    );

    // -- tools: notifications during a call --
    server.registerTool('test_tool_with_logging', { description: 'Logs three messages while it runs', inputSchema: noArgs() }, async (_args, ctx) => {
        for (const [i, msg] of ['Tool execution started', 'Tool processing data', 'Tool execution completed'].entries()) {
            if (i > 0) await sleep(50);
            await ctx.mcpReq.log('info', msg);
        }
        return text('Tool with logging executed successfully');
    });
    server.registerTool('test_tool_with_progress', { description: 'Reports progress 0, 50, 100 of 100', inputSchema: noArgs() }, async (_args, ctx) => {
        const token = ctx.mcpReq._meta?.progressToken;
        for (const [i, progress] of [0, 50, 100].entries()) {
            if (i > 0) await sleep(50);
            if (token !== undefined) {
                await ctx.mcpReq.notify({
                    method: 'notifications/progress',
                    params: { progressToken: token, progress, total: 100, message: `Completed step ${progress} of 100` }
                });
            }
        }
        return text(String(token ?? 'no progress token'));
    });
    server.registerTool('test_reconnection', { description: 'Closes its SSE stream mid-call; the result follows on the resumed stream', inputSchema: noArgs() }, async (_args, ctx) => {
        ctx.http?.closeSSE?.();
        await sleep(100);
        return text('Reconnection test completed successfully.');
    });

    // -- tools: requests to the client (real server-to-client requests on 2025-era sessions,
    //    input_required results on 2026-07-28; the SDK bridges one to the other) --
    server.registerTool(
        'test_sampling',
        {
            description: 'Asks the client to sample an LLM',
            inputSchema: fromJsonSchema({ type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'] })
        },
        async ({ prompt }, ctx) => {
            const r = response(ctx, 'sample');
            if (!r) {
                return inputRequired({
                    inputRequests: {
                        sample: inputRequired.createMessage({ messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: 100 })
                    }
                });
            }
            const content = Array.isArray(r.content) ? r.content[0] : r.content;
            return text(`LLM response: ${content?.text ?? 'No response'}`);
        }
    );
    server.registerTool(
        'test_elicitation',
        {
            description: 'Asks the user for a username and email',
            inputSchema: fromJsonSchema({ type: 'object', properties: { message: { type: 'string' } }, required: ['message'] })
        },
        async ({ message }, ctx) => {
            const r = response(ctx, 'user');
            if (!r) {
                return inputRequired({
                    inputRequests: {
                        user: inputRequired.elicit({
                            message,
                            requestedSchema: {
                                type: 'object',
                                properties: {
                                    username: { type: 'string', description: "User's response" },
                                    email: { type: 'string', description: "User's email address" }
                                },
                                required: ['username', 'email']
                            }
                        })
                    }
                });
            }
            return text(`User response: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
        }
    );
    server.registerTool('test_elicitation_sep1034_defaults', { description: 'Elicitation with defaults (SEP-1034)', inputSchema: noArgs() }, async (_args, ctx) => {
        const r = response(ctx, 'form');
        if (!r) {
            return inputRequired({
                inputRequests: {
                    form: inputRequired.elicit({
                        message: 'Please review and update the form fields with defaults',
                        requestedSchema: {
                            type: 'object',
                            properties: {
                                name: { type: 'string', description: 'User name', default: 'John Doe' },
                                age: { type: 'integer', description: 'User age', default: 30 },
                                score: { type: 'number', description: 'User score', default: 95.5 },
                                status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
                                verified: { type: 'boolean', description: 'Verification status', default: true }
                            },
                            required: []
                        }
                    })
                }
            });
        }
        return text(`Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
    });
    server.registerTool('test_elicitation_sep1330_enums', { description: 'Elicitation with every enum form (SEP-1330)', inputSchema: noArgs() }, async (_args, ctx) => {
        const r = response(ctx, 'form');
        if (!r) {
            return inputRequired({
                inputRequests: {
                    form: inputRequired.elicit({
                        message: 'Please select options from the enum fields',
                        requestedSchema: {
                            type: 'object',
                            properties: {
                                untitledSingle: { type: 'string', description: 'Select one option', enum: ['option1', 'option2', 'option3'] },
                                titledSingle: {
                                    type: 'string',
                                    description: 'Select one option with titles',
                                    oneOf: [
                                        { const: 'value1', title: 'First Option' },
                                        { const: 'value2', title: 'Second Option' },
                                        { const: 'value3', title: 'Third Option' }
                                    ]
                                },
                                legacyEnum: {
                                    type: 'string',
                                    description: 'Select one option (legacy)',
                                    enum: ['opt1', 'opt2', 'opt3'],
                                    enumNames: ['Option One', 'Option Two', 'Option Three']
                                },
                                untitledMulti: {
                                    type: 'array',
                                    description: 'Select multiple options',
                                    minItems: 1,
                                    maxItems: 3,
                                    items: { type: 'string', enum: ['option1', 'option2', 'option3'] }
                                },
                                titledMulti: {
                                    type: 'array',
                                    description: 'Select multiple options with titles',
                                    minItems: 1,
                                    maxItems: 3,
                                    items: {
                                        anyOf: [
                                            { const: 'value1', title: 'First Choice' },
                                            { const: 'value2', title: 'Second Choice' },
                                            { const: 'value3', title: 'Third Choice' }
                                        ]
                                    }
                                }
                            },
                            required: []
                        }
                    })
                }
            });
        }
        return text(`Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
    });

    // -- tools: multi round trip (SEP-2322) --
    server.registerTool('test_input_required_result_elicitation', { description: 'Asks for a name, then greets', inputSchema: noArgs() }, async (_args, ctx) => {
        const name = accepted(ctx, 'user_name')?.name;
        if (typeof name !== 'string') {
            return inputRequired({ inputRequests: { user_name: elicitName('What is your name?') } });
        }
        return text(`Hello, ${name}!`);
    });
    server.registerTool('test_input_required_result_sampling', { description: 'Asks the client to sample, then answers', inputSchema: noArgs() }, async (_args, ctx) => {
        const r = response(ctx, 'capital_question');
        if (!r) {
            return inputRequired({
                inputRequests: {
                    capital_question: inputRequired.createMessage({
                        messages: [{ role: 'user', content: { type: 'text', text: 'What is the capital of France?' } }],
                        maxTokens: 100
                    })
                }
            });
        }
        const content = Array.isArray(r.content) ? r.content[0] : r.content;
        return text(`Sampling response: ${content?.text ?? ''}`);
    });
    server.registerTool('test_input_required_result_list_roots', { description: 'Asks for the roots, then lists them', inputSchema: noArgs() }, async (_args, ctx) => {
        const r = response(ctx, 'client_roots');
        if (!r || !Array.isArray(r.roots)) {
            return inputRequired({ inputRequests: { client_roots: inputRequired.listRoots() } });
        }
        return text(`Roots: ${r.roots.map((root) => root.uri).join(', ')}`);
    });
    server.registerTool('test_input_required_result_request_state', { description: 'Round-trips requestState', inputSchema: noArgs() }, async (_args, ctx) => {
        const state = ctx.mcpReq.requestState();
        if (state?.step !== 'confirm' || !response(ctx, 'confirm')) {
            return inputRequired({
                inputRequests: {
                    confirm: inputRequired.elicit({
                        message: 'Please confirm',
                        requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] }
                    })
                },
                requestState: await stateCodec.mint({ step: 'confirm' }, ctx)
            });
        }
        return text('state-ok: the request state came back intact');
    });
    server.registerTool('test_input_required_result_multiple_inputs', { description: 'Asks for three inputs at once', inputSchema: noArgs() }, async (_args, ctx) => {
        const state = ctx.mcpReq.requestState();
        const keys = ['user_name', 'greeting', 'client_roots'];
        if (state?.step !== 'all' || !keys.every((k) => response(ctx, k))) {
            return inputRequired({
                inputRequests: {
                    user_name: elicitName('What is your name?'),
                    greeting: inputRequired.createMessage({
                        messages: [{ role: 'user', content: { type: 'text', text: 'Generate a greeting' } }],
                        maxTokens: 50
                    }),
                    client_roots: inputRequired.listRoots()
                },
                requestState: await stateCodec.mint({ step: 'all' }, ctx)
            });
        }
        return text(`Got all inputs: ${keys.join(', ')}`);
    });
    server.registerTool('test_input_required_result_multi_round', { description: 'Asks two questions in two rounds', inputSchema: noArgs() }, async (_args, ctx) => {
        const state = ctx.mcpReq.requestState();
        if (state?.round === 2) {
            const color = accepted(ctx, 'step2')?.color;
            if (typeof color === 'string') return text(`Hello ${state.name}, your favorite color is ${color}.`);
        }
        const name = state?.round === 1 ? accepted(ctx, 'step1')?.name : undefined;
        if (typeof name === 'string' || state?.round === 2) {
            return inputRequired({
                inputRequests: {
                    step2: inputRequired.elicit({
                        message: 'Step 2: What is your favorite color?',
                        requestedSchema: { type: 'object', properties: { color: { type: 'string' } }, required: ['color'] }
                    })
                },
                requestState: await stateCodec.mint({ round: 2, name: name ?? state.name }, ctx)
            });
        }
        return inputRequired({
            inputRequests: { step1: elicitName('Step 1: What is your name?') },
            requestState: await stateCodec.mint({ round: 1 }, ctx)
        });
    });
    server.registerTool('test_input_required_result_tampered_state', { description: 'Refuses a tampered requestState', inputSchema: noArgs() }, async (_args, ctx) => {
        const state = ctx.mcpReq.requestState();
        if (state?.step !== 'confirm' || !response(ctx, 'confirm')) {
            return inputRequired({
                inputRequests: {
                    confirm: inputRequired.elicit({
                        message: 'Please confirm',
                        requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] }
                    })
                },
                requestState: await stateCodec.mint({ step: 'confirm' }, ctx)
            });
        }
        return text('state verified');
    });

    // -- tools the 2026-07-28 scenarios probe --
    server.registerTool(
        'test_input_required_result_capabilities',
        { description: 'Asks only for what the client declared it can give', inputSchema: noArgs() },
        async (_args, ctx) => {
            if (response(ctx, 'sample') || response(ctx, 'confirm')) return text('done');
            const caps = ctx.mcpReq.envelope?.[CLIENT_CAPABILITIES_META_KEY] ?? {};
            const inputRequests = {};
            if (caps.sampling) {
                inputRequests.sample = inputRequired.createMessage({
                    messages: [{ role: 'user', content: { type: 'text', text: 'Say hello' } }],
                    maxTokens: 20
                });
            }
            if (caps.elicitation) inputRequests.confirm = elicitName('What is your name?');
            if (Object.keys(inputRequests).length === 0) return text('the client declared neither sampling nor elicitation');
            return inputRequired({ inputRequests });
        }
    );
    // Needs sampling: a client that did not declare it gets -32021 (the SDK checks every
    // embedded request against the capabilities the request declared).
    server.registerTool('test_missing_capability', { description: 'Needs the sampling capability', inputSchema: noArgs() }, async (_args, ctx) => {
        if (response(ctx, 'sample')) return text('sampled');
        return inputRequired({
            inputRequests: {
                sample: inputRequired.createMessage({ messages: [{ role: 'user', content: { type: 'text', text: 'Say hello' } }], maxTokens: 20 })
            }
        });
    });
    server.registerTool('test_streaming_elicitation', { description: 'Reports progress, then asks for a name', inputSchema: noArgs() }, async (_args, ctx) => {
        const name = accepted(ctx, 'user_name')?.name;
        if (typeof name === 'string') return text(`Hello, ${name}!`);
        const token = ctx.mcpReq._meta?.progressToken;
        if (token !== undefined) {
            await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken: token, progress: 1, total: 2 } });
        }
        return inputRequired({ inputRequests: { user_name: elicitName('What is your name?') } });
    });
    // Logs at info: the SDK sends the message only to a client that asked for a log level.
    server.registerTool('test_logging_tool', { description: 'Logs one message', inputSchema: noArgs() }, async (_args, ctx) => {
        await ctx.mcpReq.log('info', 'test_logging_tool ran');
        return text('logged');
    });
    // SEP-2243: region is mirrored into the Mcp-Param-Region header, which the SDK checks
    // against the body (Base64 sentinel decoding included).
    server.registerTool(
        'test_custom_headers',
        {
            description: 'Has a parameter mirrored into an HTTP header',
            inputSchema: fromJsonSchema({
                type: 'object',
                properties: { region: { type: 'string', description: 'A region', 'x-mcp-header': 'Region' } },
                required: ['region']
            })
        },
        async ({ region }) => text(`region: ${region}`)
    );

    // -- resources --
    server.registerResource(
        'static-text',
        'test://static-text',
        { description: 'A static text resource', mimeType: 'text/plain' },
        async (uri) => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }] })
    );
    server.registerResource(
        'static-binary',
        'test://static-binary',
        { description: 'A static binary resource (a PNG)', mimeType: 'image/png' },
        async (uri) => ({ contents: [{ uri: uri.href, mimeType: 'image/png', blob: PNG_1x1 }] })
    );
    server.registerResource(
        'watched-resource',
        'test://watched-resource',
        { description: 'A resource clients can subscribe to', mimeType: 'text/plain' },
        async (uri) => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'Watched resource content' }] })
    );
    server.registerResource(
        'template-data',
        new ResourceTemplate('test://template/{id}/data', { list: undefined }),
        { description: 'Data for an id', mimeType: 'application/json' },
        async (uri, { id }) => ({
            contents: [
                { uri: uri.href, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }
            ]
        })
    );

    // -- prompts --
    server.registerPrompt('test_simple_prompt', { description: 'A prompt without arguments' }, async () => ({
        messages: [{ role: 'user', content: { type: 'text', text: 'This is a simple prompt for testing.' } }]
    }));
    server.registerPrompt(
        'test_prompt_with_arguments',
        {
            description: 'A prompt with two arguments',
            argsSchema: fromJsonSchema({
                type: 'object',
                properties: { arg1: { type: 'string', description: 'First test argument' }, arg2: { type: 'string', description: 'Second test argument' } },
                required: ['arg1', 'arg2']
            })
        },
        async ({ arg1, arg2 }) => ({
            messages: [{ role: 'user', content: { type: 'text', text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` } }]
        })
    );
    server.registerPrompt(
        'test_prompt_with_embedded_resource',
        {
            description: 'A prompt that embeds a resource',
            argsSchema: fromJsonSchema({
                type: 'object',
                properties: { resourceUri: { type: 'string', description: 'URI of the resource to embed' } },
                required: ['resourceUri']
            })
        },
        async ({ resourceUri }) => ({
            messages: [
                {
                    role: 'user',
                    content: { type: 'resource', resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } }
                },
                { role: 'user', content: { type: 'text', text: 'Please process the embedded resource above.' } }
            ]
        })
    );
    server.registerPrompt('test_prompt_with_image', { description: 'A prompt with an image' }, async () => ({
        messages: [
            { role: 'user', content: { type: 'image', data: PNG_1x1, mimeType: 'image/png' } },
            { role: 'user', content: { type: 'text', text: 'Please analyze the image above.' } }
        ]
    }));
    server.registerPrompt('test_input_required_result_prompt', { description: 'A prompt that asks for context first' }, async (ctx) => {
        const context = accepted(ctx, 'user_context')?.context;
        if (typeof context !== 'string') {
            return inputRequired({
                inputRequests: {
                    user_context: inputRequired.elicit({
                        message: 'What context should the prompt use?',
                        requestedSchema: { type: 'object', properties: { context: { type: 'string' } }, required: ['context'] }
                    })
                }
            });
        }
        return { messages: [{ role: 'user', content: { type: 'text', text: `Use this context: ${context}` } }] };
    });

    // -- completion and subscriptions --
    server.server.setRequestHandler('completion/complete', async (req) => {
        const { ref, argument } = req.params;
        const known = { test_prompt_with_arguments: { arg1: ['paris', 'park', 'party'], arg2: ['world', 'word'] } };
        if (ref?.type === 'ref/prompt' && !known[ref.name]) {
            throw new ProtocolError(-32602, `unknown prompt ${ref.name}`);
        }
        const candidates = (ref?.type === 'ref/prompt' && known[ref.name][argument?.name]) || [];
        const values = candidates.filter((v) => v.startsWith(argument?.value ?? ''));
        return { completion: { values, total: values.length, hasMore: false } };
    });
    if (session) {
        server.server.setRequestHandler('resources/subscribe', async (req) => {
            session.subscriptions.add(req.params.uri);
            return {};
        });
        server.server.setRequestHandler('resources/unsubscribe', async (req) => {
            session.subscriptions.delete(req.params.uri);
            return {};
        });
    }

    registerTaskTools(server, session);
    if (!session) registerTaskMethods(server);
    skills.attach(server);
    return server;
}

// ---- serving ----------------------------------------------------------------------------------

// eventStore keeps the last MAX_EVENTS SSE events so a client can resume a stream with
// Last-Event-ID (server-sse-polling).
function newEventStore() {
    const events = new Map(); // eventId -> {streamId, message}
    let seq = 0;
    return {
        async storeEvent(streamId, message) {
            const id = `${streamId}_${String(++seq).padStart(12, '0')}`;
            events.set(id, { streamId, message });
            while (events.size > MAX_EVENTS) events.delete(events.keys().next().value);
            return id;
        },
        async getStreamIdForEventId(eventId) {
            return events.get(eventId)?.streamId;
        },
        async replayEventsAfter(lastEventId, { send }) {
            const from = events.get(lastEventId);
            if (!from) throw new Error('unknown event id');
            let after = false;
            for (const [id, e] of events) {
                if (id === lastEventId) {
                    after = true;
                    continue;
                }
                if (after && e.streamId === from.streamId) await send(id, e.message);
            }
            return from.streamId;
        }
    };
}

const sessions = new Map(); // Mcp-Session-Id -> {transport, server, version (negotiated at initialize)}

// pinVersion makes a session's requests carry the protocol version negotiated at initialize in
// MCP-Protocol-Version. Conformance 0.1.16's server-sse-polling sends 2025-03-26 on a session
// that negotiated 2025-11-25; the SDK would then leave out the SSE priming event (a 2025-11-25
// feature) that the scenario checks.
function pinVersion(req, version) {
    const sent = req.headers.get('mcp-protocol-version');
    if (!version || !sent || sent === version) return req;
    const headers = new Headers(req.headers);
    headers.set('mcp-protocol-version', version);
    return new Request(req, { headers, duplex: 'half' });
}
const eventStore = newEventStore();

async function legacy(req) {
    const id = req.headers.get('mcp-session-id');
    if (id) {
        const s = sessions.get(id);
        if (!s) return jsonError(404, -32001, 'Session not found');
        sessions.delete(id); // most recently used last
        sessions.set(id, s);
        return s.transport.handleRequest(pinVersion(req, s.version));
    }
    if (sessions.size >= MAX_SESSIONS) {
        // the least recently used session makes room
        const [oldest, s] = sessions.entries().next().value;
        sessions.delete(oldest);
        await s.transport.close().catch(() => {});
    }
    let version;
    if (req.method === 'POST') {
        const body = await req
            .clone()
            .json()
            .catch(() => undefined);
        if (body?.method === 'initialize' && SUPPORTED_PROTOCOL_VERSIONS.includes(body.params?.protocolVersion)) {
            version = body.params.protocolVersion;
        }
    }
    const transport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore,
        retryInterval: 100,
        onsessioninitialized: (sid) => sessions.set(sid, { transport, server, version }),
        onsessionclosed: (sid) => sessions.delete(sid)
    });
    transport.onclose = () => {
        if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    const server = buildServer({ subscriptions: new Set() });
    await server.connect(transport);
    return transport.handleRequest(req);
}

const modern = createMcpHandler(() => buildServer(undefined), { legacy: 'reject', onerror: () => {} });

function jsonError(status, code, message) {
    return new Response(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code, message } }), {
        status,
        headers: { 'content-type': 'application/json' }
    });
}

async function handle(req) {
    const url = new URL(req.url);
    if (url.pathname !== '/mcp') return new Response('not found', { status: 404 });
    const bad = hostHeaderValidationResponse(req, localhostAllowedHostnames()) ?? originValidationResponse(req, localhostAllowedOrigins());
    if (bad) return bad;
    if (await isLegacyRequest(req, undefined, { maxRequestBodySize: MAX_BODY })) return legacy(req);
    return createdTask(await modern.fetch(req));
}

// toWebRequest turns a node:http request into a fetch Request (the body streamed as it comes).
// Its signal aborts when the client goes away before the response is complete.
function toWebRequest(nreq, nres) {
    const headers = new Headers();
    for (const [k, v] of Object.entries(nreq.headers)) {
        if (Array.isArray(v)) v.forEach((x) => headers.append(k, x));
        else if (v !== undefined) headers.set(k, v);
    }
    const ac = new AbortController();
    nres.on('close', () => {
        if (!nres.writableFinished) ac.abort();
    });
    const hasBody = nreq.method !== 'GET' && nreq.method !== 'HEAD';
    return new Request(`http://${nreq.headers.host ?? '127.0.0.1'}${nreq.url}`, {
        method: nreq.method,
        headers,
        body: hasBody ? nreq : undefined,
        duplex: hasBody ? 'half' : undefined,
        signal: ac.signal
    });
}

async function writeWebResponse(res, nres) {
    const headers = {};
    res.headers.forEach((v, k) => {
        headers[k] = k in headers ? `${headers[k]}, ${v}` : v;
    });
    nres.writeHead(res.status, headers);
    if (!res.body) return nres.end();
    const reader = res.body.getReader();
    nres.on('close', () => reader.cancel().catch(() => {}));
    try {
        for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            nres.write(value);
        }
    } catch {
        // the client went away or the stream was closed on purpose (test_reconnection)
    }
    nres.end();
}

const http = createServer(async (nreq, nres) => {
    try {
        await writeWebResponse(await handle(toWebRequest(nreq, nres)), nres);
    } catch (err) {
        if (!nres.headersSent) nres.writeHead(500, { 'content-type': 'text/plain' });
        nres.end(`internal error: ${err?.message ?? err}`);
    }
});

const port = Number(process.argv[2] ?? 0);
http.listen(port, '127.0.0.1', () => {
    process.stdout.write(`http://127.0.0.1:${http.address().port}/mcp\n`);
});

let stopping = false;
async function stop() {
    if (stopping) return;
    stopping = true;
    http.closeAllConnections?.();
    http.close();
    await modern.close().catch(() => {});
    await Promise.all([...sessions.values()].map((s) => s.transport.close().catch(() => {})));
    process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
process.stdin.on('close', stop);
process.stdin.resume();
