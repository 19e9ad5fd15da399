package gateway

// entities are HTML's named character references that stand for ASCII text, without their ';':
// every one in the HTML standard's table (TestEntitiesAreHTMLs checks them against the html
// package's own table). A credential is ASCII in practice; the references to characters beyond
// it are not read by name (numerically they are).
var entities = map[string]string{
	"Tab":              "\t",
	"NewLine":          "\n",
	"excl":             "!",
	"QUOT":             "\"",
	"quot":             "\"",
	"num":              "#",
	"dollar":           "$",
	"percnt":           "%",
	"AMP":              "&",
	"amp":              "&",
	"apos":             "'",
	"lpar":             "(",
	"rpar":             ")",
	"ast":              "*",
	"midast":           "*",
	"plus":             "+",
	"comma":            ",",
	"period":           ".",
	"sol":              "/",
	"colon":            ":",
	"semi":             ";",
	"LT":               "<",
	"lt":               "<",
	"equals":           "=",
	"GT":               ">",
	"gt":               ">",
	"quest":            "?",
	"commat":           "@",
	"lbrack":           "[",
	"lsqb":             "[",
	"bsol":             "\\",
	"rbrack":           "]",
	"rsqb":             "]",
	"Hat":              "^",
	"UnderBar":         "_",
	"lowbar":           "_",
	"DiacriticalGrave": "`",
	"grave":            "`",
	"fjlig":            "fj",
	"lbrace":           "{",
	"lcub":             "{",
	"VerticalLine":     "|",
	"verbar":           "|",
	"vert":             "|",
	"rbrace":           "}",
	"rcub":             "}",
}

// legacyEntities are the references HTML also reads without a ';' ("&amp", "&lt"), of those
// in entities.
var legacyEntities = map[string]string{
	"QUOT": "\"",
	"quot": "\"",
	"AMP":  "&",
	"amp":  "&",
	"LT":   "<",
	"lt":   "<",
	"GT":   ">",
	"gt":   ">",
}

// maxEntityName and maxLegacyName are the longest names in entities and legacyEntities.
const (
	maxEntityName = 16
	maxLegacyName = 4
)
