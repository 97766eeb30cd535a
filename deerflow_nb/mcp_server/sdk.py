"""The MCP SDK, either major: one lowlevel server over ``service.MemoryService``.

jupyter-ai 3.2.0 pins ``mcp<2``, so the ``mcp`` extra must work on 1.x as well as 2.x. The
two lowlevel servers differ in how handlers are registered: 1.x by decorators
(``@server.list_tools()``), with the session on ``server.request_context``; 2.x by
constructor callbacks (``on_list_tools=``) given a context holding the session. Which one
is installed is checked once, at import; the stdio and streamable-HTTP transports and the
types are the same for both. This is the one module that imports ``mcp``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.helper_types import ReadResourceContents

if TYPE_CHECKING:
    from .service import MemoryService, ResourceSpec

NAME = "deerflow-nb"
INSTRUCTIONS = (
    "Long-term memory of the user (deerflow-nb): search facts and past conversations, "
    "remember a fact the user asks you to, and journal your conversation with add_messages."
)
MAJOR = 1 if hasattr(Server, "list_tools") else 2  # 1.x registers handlers by decorator


class ToolFailed(Exception):
    """A tool's ``Error: ...`` text, raised for mcp 1.x to send as an error result."""


def _tools() -> list[types.Tool]:
    from .service import tool_list

    return [
        types.Tool(name=t.name, description=t.description, inputSchema=t.input_schema)
        for t in tool_list()
    ]


def _result(text: str, is_error: bool) -> types.CallToolResult:
    content = [types.TextContent(type="text", text=text)]
    return types.CallToolResult(content=content, isError=is_error)


def _resource(spec: ResourceSpec) -> types.Resource:
    return types.Resource(
        uri=spec.uri, name=spec.name, description=spec.description, mimeType="text/plain"
    )


def _template(spec: ResourceSpec) -> types.ResourceTemplate:
    return types.ResourceTemplate(
        uriTemplate=spec.uri, name=spec.name, description=spec.description, mimeType="text/plain"
    )


def session_key(request: Any) -> str:
    """Which client session a call belongs to, for the per-session ``remember`` cap: over
    HTTP the ``Mcp-Session-Id`` the SDK issued, else the process (a stdio server serves one
    client; an HTTP request without a session shares the process's count)."""
    headers = getattr(request, "headers", None)
    session = headers.get("mcp-session-id") if headers is not None else None
    return f"http {session}" if session else "process"


def build_server(service: MemoryService) -> Any:
    """A lowlevel ``Server`` answering tools and resources from ``service``."""
    if MAJOR == 1:
        return _server_v1(service)
    return _server_v2(service)


def _server_v1(service: MemoryService) -> Any:
    server: Any = Server(NAME, instructions=INSTRUCTIONS)

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return _tools()

    @server.call_tool(validate_input=False)  # the tools check their arguments themselves
    async def call_tool(name: str, arguments: dict[str, Any]) -> list[types.TextContent]:
        text, is_error = service.call(name, arguments, session_key(server.request_context.request))
        if is_error:  # every 1.x makes this an error result with the text (not all take one)
            raise ToolFailed(text)
        return [types.TextContent(type="text", text=text)]

    @server.list_resources()
    async def list_resources() -> list[types.Resource]:
        return [_resource(r) for r in service.resources()]

    @server.list_resource_templates()
    async def list_templates() -> list[types.ResourceTemplate]:
        return [_template(r) for r in service.templates()]

    @server.read_resource()
    async def read_resource(uri: Any) -> list[ReadResourceContents]:
        return [ReadResourceContents(content=service.read(str(uri)), mime_type="text/plain")]

    return server


def _server_v2(service: MemoryService) -> Any:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=_tools())

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        return _result(*service.call(params.name, params.arguments, session_key(ctx.request)))

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[_resource(r) for r in service.resources()])

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        templates = [_template(r) for r in service.templates()]
        return types.ListResourceTemplatesResult(resourceTemplates=templates)

    async def read_resource(ctx: Any, params: Any) -> types.ReadResourceResult:
        text = service.read(str(params.uri))
        contents = [types.TextResourceContents(uri=params.uri, mimeType="text/plain", text=text)]
        return types.ReadResourceResult(contents=contents)

    return Server(
        NAME,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


async def serve_stdio(server: Any) -> None:
    """Serve one client over this process's stdin and stdout until it closes them."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def http_sessions(server: Any, hosts: list[str], origins: list[str]) -> Any:
    """The SDK's streamable-HTTP session manager for ``server`` (its ``handle_request`` is
    the ASGI app, ``run()`` its lifetime), with the SDK's own Host and Origin checks too."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings

    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
    return StreamableHTTPSessionManager(app=server, security_settings=security)
