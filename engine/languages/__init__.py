"""The languages a script can be written in: for each, how its code is prepared and checked
on the host. ``javascript`` (with TypeScript's types) is the only one so far."""
