"""pyrmq-hello: answers request code 9001 with a greeting and counts the connections it has seen."""

import attrs

from pyrmq.kernel.hookspecs import hookimpl
from pyrmq.kernel.settings import setting

HELLO = 9001  # a request code of our own, outside RocketMQ's range


@attrs.frozen
class HelloSettings:
    """The plugin's own table, ``[plugins."hello"]``: ``pyrmq plugins --settings`` lists it."""

    greeting: str = setting("hello", help="the first word of the answer")


class Hello:
    """Made once per role and registered as a plugin: its methods are hook implementations."""

    def __init__(self, settings: HelloSettings) -> None:
        self.greeting = settings.greeting
        self.connections = 0

    @hookimpl
    def pyrmq_connection_opened(self, role, connection):
        self.connections += 1

    @hookimpl
    def pyrmq_register_processors(self, role):
        return {HELLO: self.hello}  # what configure made; nothing is built here

    async def hello(self, connection, request):
        name = request.ext_fields.get("name", "world")
        return request.make_response(0, remark=f"{self.greeting}, {name} (connection #{self.connections})")


@hookimpl
def pyrmq_register_settings():
    return {"plugins.hello": HelloSettings}


@hookimpl
def pyrmq_configure(kernel):
    kernel.register(Hello(kernel.settings(HelloSettings)), "hello.service")
