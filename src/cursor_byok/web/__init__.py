"""Work the server does itself for a tool call, off the client: web search, page fetch, image
generation. Native values in (`types.ServerJob`), native values out (`types.JobOutcome`); the
runtime runs a job when a tool machine asks for one and hands the outcome back to the machine.
Nothing here knows the loop, the dialect or the store."""
