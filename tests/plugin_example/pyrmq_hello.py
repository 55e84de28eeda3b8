"""pyrmq-hello: answers request code 9001 with a greeting and counts the connections it has seen."""

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.kernel import StateKey

HELLO = 9001  # a request code of our own, outside RocketMQ's range
CONNECTIONS = StateKey[list]("hello.connections")


@hookimpl
def pyrmq_configure(kernel):
    kernel.state.put(CONNECTIONS, [])


@hookimpl
def pyrmq_connection_opened(kernel, role, connection):
    kernel.state.get(CONNECTIONS).append(connection)


@hookimpl
def pyrmq_register_processors(kernel, role):
    async def hello(connection, request):
        name = request.ext_fields.get("name", "world")
        return request.make_response(0, remark=f"hello, {name} (connection #{len(kernel.state.get(CONNECTIONS))})")

    return {HELLO: hello}
