from django.apps import AppConfig


class SupervisorConfig(AppConfig):
    name = "supervisor"
    verbose_name = "Supervisor"

    def ready(self) -> None:
        from django.core.servers import basehttp

        # `runserver` (make run) answers with Python's http.server, which writes the headers and
        # the body in two segments with Nagle's algorithm on: on a kept-alive connection the body
        # waited for the client's delayed acknowledgement of the headers, some 40 ms a request
        # (a client submitting one job at a time got 18 a second). gunicorn sets TCP_NODELAY
        # itself; Django's development server now does too.
        basehttp.WSGIRequestHandler.disable_nagle_algorithm = True
