SELECT ident, p FROM cheap
